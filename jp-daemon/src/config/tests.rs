//! The configuration's tests: the embedded file, errors that name file, line and
//! key, command-line flags, and which keys a reload cannot apply.
use super::*;
use crate::windows::rotation::config::{Percent, RotationConfig};

#[test]
fn embedded_file_is_the_default_configuration() {
    let c = Config::parse(DEFAULT_CONFIG_TOML, "jpd.toml").unwrap();
    assert_eq!(c, Config::default());
    assert_eq!(c.kernel.options(), KernelOptions::default());
    assert_eq!(c.server.socket, PathBuf::from("/run/jp/jpd.sock"));
}

#[test]
fn embedded_file_documents_every_key() {
    // Every key of the default configuration appears, uncommented, in jpd.toml.
    for key in [
        "[server]",
        "socket =",
        "group =",
        "allow_uids =",
        "allow_gids =",
        "admin_uids =",
        "admin_gids =",
        "tcp =",
        "tls_cert =",
        "tls_key =",
        "tls_client_ca =",
        "tls_client_names =",
        "tcp_anonymous_reads =",
        "max_watch_streams_per_uid =",
        "max_watch_streams =",
        "[kernel]",
        "frequency_hz =",
        "shift =",
        "read_interval_ms =",
        "irq_ip_sample_every =",
        "irq_ip_samples_per_second =",
        "bpf_stats =",
        "jvm_contexts =",
        "offcpu =",
        "offcpu_max_switches_per_cpu_per_second =",
        "offcpu_idle =",
        "[log]",
        "level =",
        "[export]",
        "enabled =",
        "listen =",
        "max_profile_seconds =",
        "max_connections =",
        "max_inflight =",
        "header_timeout_seconds =",
        "idle_timeout_seconds =",
        "allowed_hosts =",
        "real_kernel_addresses =",
        "[pyroscope]",
        "url =",
        "interval_s =",
        "timeout_s =",
        "labels =",
        "basic_auth_user =",
        "basic_auth_password_file =",
        "bearer_token_file =",
        "tls_ca_file =",
        "tenant_id =",
        "max_backlog =",
        "max_backlog_mb =",
        "kernel =",
        "jvms =",
        "[otlp]",
        "endpoint =",
        "protocol =",
        "headers =",
        "resource_attributes =",
        "open_windows =",
        "[windows]",
        "agent_library =",
        "max_seconds =",
        "max_open =",
        "keep =",
        "[windows.rotation]",
        "budget_percent =",
        "seconds =",
        "main_class =",
        "uids =",
        "cgroups =",
        "attach_without_agent =",
    ] {
        assert!(
            DEFAULT_CONFIG_TOML.lines().any(|l| l.starts_with(key)),
            "jpd.toml does not set {key}"
        );
    }
}

#[test]
fn empty_file_gives_defaults() {
    assert_eq!(Config::parse("", "x.toml").unwrap(), Config::default());
}

#[test]
fn partial_file_keeps_other_defaults() {
    let c = Config::parse("[kernel]\nshift = 2\n", "x.toml").unwrap();
    assert_eq!(c.kernel.shift, 2);
    assert_eq!(c.kernel.frequency_hz, 997);
    assert_eq!(c.server, ServerConfig::default());
}

#[test]
fn offcpu_is_off_by_default_and_its_cap_is_checked() {
    assert!(!Config::default().kernel.offcpu);
    let c = Config::parse(
        "[kernel]\noffcpu = true\noffcpu_max_switches_per_cpu_per_second = 500\n",
        "x.toml",
    )
    .unwrap();
    assert!(c.kernel.options().offcpu);
    assert_eq!(
        c.kernel.options().offcpu_max_switches_per_cpu_per_second,
        500
    );
    let e = Config::parse(
        "[kernel]\noffcpu_max_switches_per_cpu_per_second = 0\n",
        "x.toml",
    )
    .unwrap_err();
    assert!(
        format!("{e:#}").contains("offcpu_max_switches_per_cpu_per_second"),
        "{e:#}"
    );
}

#[test]
fn offcpu_idle_patterns_are_checked_at_load() {
    assert!(Config::default().kernel.offcpu_idle.is_empty());
    let c = Config::parse(
        "[kernel]\noffcpu_idle = [\"com.acme.Poller.await\", \"com.acme.jobs.*\"]\n",
        "x.toml",
    )
    .unwrap();
    assert_eq!(
        c.kernel.offcpu_idle,
        ["com.acme.Poller.await", "com.acme.jobs.*"]
    );
    let e = Config::parse("[kernel]\noffcpu_idle = [\"await()V\"]\n", "x.toml").unwrap_err();
    let e = format!("{e:#}");
    assert!(e.contains("offcpu_idle") && e.contains("await()V"), "{e}");
}

#[test]
fn jvm_contexts_is_on_by_default_and_can_be_turned_off() {
    assert!(Config::default().kernel.jvm_contexts);
    assert!(Config::default().kernel.options().jvm_contexts);
    let c = Config::parse("[kernel]\njvm_contexts = false\n", "x.toml").unwrap();
    assert!(!c.kernel.jvm_contexts);
    assert!(!c.kernel.options().jvm_contexts);
    // The rest of [kernel] keeps its defaults.
    assert_eq!(c.kernel.frequency_hz, 997);
    let e = Config::parse("[kernel]\njvm_contexts = \"no\"\n", "x.toml").unwrap_err();
    assert!(matches!(&e, ConfigError::Parse { line: 2, .. }), "{e}");
}

#[test]
fn unknown_key_names_file_line_and_key() {
    let text = "[server]\nsocket = \"/tmp/x.sock\"\n\n[kernel]\nfrequency = 99\n";
    let e = Config::parse(text, "/etc/jp/jpd.toml").unwrap_err();
    match &e {
        ConfigError::Parse {
            path,
            line,
            column,
            message,
        } => {
            assert_eq!(path, "/etc/jp/jpd.toml");
            assert_eq!((*line, *column), (5, 1));
            assert!(
                message.starts_with("unknown field `frequency`"),
                "{message}"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    let shown = e.to_string();
    assert!(
        shown.starts_with("invalid config /etc/jp/jpd.toml, line 5, column 1: unknown field `frequency`, expected one of"),
        "{shown}"
    );
}

#[test]
fn unknown_section_is_rejected() {
    let e = Config::parse("[jvm]\nx = 1\n", "c.toml").unwrap_err();
    let ConfigError::Parse { line, message, .. } = e else {
        panic!("{e:?}")
    };
    assert_eq!(line, 1);
    assert!(message.starts_with("unknown field `jvm`"), "{message}");
}

#[test]
fn wrong_type_names_line() {
    let e = Config::parse("[kernel]\nshift = 4\nfrequency_hz = \"fast\"\n", "c.toml").unwrap_err();
    let ConfigError::Parse {
        line,
        column,
        message,
        ..
    } = e
    else {
        panic!("{e:?}")
    };
    assert_eq!((line, column), (3, 16));
    assert!(
        message.contains("invalid type: string \"fast\", expected u64"),
        "{message}"
    );
}

#[test]
fn out_of_range_value_names_line() {
    let e = Config::parse("[kernel]\nshift = 40\n", "c.toml").unwrap_err();
    let ConfigError::Parse { line, message, .. } = e else {
        panic!("{e:?}")
    };
    assert_eq!(line, 2);
    assert_eq!(message, "shift = 40 is out of range 0..=16");
    let e = Config::parse("[kernel]\nfrequency_hz = 0\n", "c.toml").unwrap_err();
    assert!(
        e.to_string()
            .ends_with("line 2, column 16: frequency_hz = 0 is out of range 1..=100000"),
        "{e}"
    );
}

#[test]
fn bad_log_level() {
    let e = Config::parse("[log]\nlevel = \"loud\"\n", "c.toml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid config c.toml, line 2, column 9: level = \"loud\" is not one of off, error, warn, info, debug, trace"
    );
}

#[test]
fn syntax_error_names_line() {
    let e = Config::parse("[kernel]\nshift = = 3\n", "c.toml").unwrap_err();
    let ConfigError::Parse { line, .. } = e else {
        panic!("{e:?}")
    };
    assert_eq!(line, 2);
}

#[test]
fn flags_win_and_are_checked() {
    let mut c = Config::default();
    c.override_with(Some("/tmp/j.sock".into()), Some(250), Some(2))
        .unwrap();
    assert_eq!(c.server.socket, PathBuf::from("/tmp/j.sock"));
    assert_eq!((c.kernel.frequency_hz, c.kernel.shift), (250, 2));
    let e = c.override_with(None, Some(0), None).unwrap_err();
    assert_eq!(e.to_string(), "--frequency = 0 is out of range 1..=100000");
    let e = c.override_with(None, None, Some(17)).unwrap_err();
    assert_eq!(e.to_string(), "--shift = 17 is out of range 0..=16");
}

#[test]
fn missing_explicit_file_is_an_error() {
    let e = Config::load(Some(Path::new("/nonexistent/jpd.toml"))).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("cannot read config file /nonexistent/jpd.toml: "),
        "{e}"
    );
}

#[test]
fn tcp_without_tls_names_the_tcp_key() {
    let text = "[server]\ngroup = \"jp\"\n  tcp = \"0.0.0.0:9465\"\n";
    let e = Config::parse(text, "c.toml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid config c.toml, line 3, column 3: tcp needs TLS: set tls_cert and tls_key (gRPC over TCP is never plain text)"
    );
    let e = Config::parse("[server]\ntcp = \"nowhere\"\n", "c.toml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid config c.toml, line 2, column 1: tcp = \"nowhere\" is not an IP address and port"
    );
}

#[test]
fn tcp_with_tls_is_accepted() {
    let text = "[server]\ntcp = \"127.0.0.1:9465\"\ntls_cert = \"/etc/jp/tls/jpd.pem\"\ntls_key = \"/etc/jp/tls/jpd.key\"\n";
    // Without a client CA only when anonymous reads are asked for.
    let e = Config::parse(text, "c.toml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid config c.toml, line 2, column 1: tcp without tls_client_ca lets anyone who reaches the port read the API: set tls_client_ca, or tcp_anonymous_reads = true to allow anonymous reads (command lines are then cut to the program's name)"
    );
    let c = Config::parse(&format!("{text}tcp_anonymous_reads = true\n"), "c.toml").unwrap();
    assert!(c.server.tcp_anonymous_reads);
    assert_eq!(c.server.tcp, "127.0.0.1:9465");
    assert_eq!(c.server.tls_cert, PathBuf::from("/etc/jp/tls/jpd.pem"));
    assert_eq!(c.server.tls_key, PathBuf::from("/etc/jp/tls/jpd.key"));
    assert!(c.server.tls_client_ca.as_os_str().is_empty());
    let text = format!(
        "{text}tls_client_ca = \"/etc/jp/tls/ca.pem\"\ntls_client_names = [\"ops.example\", \"ci\"]\n"
    );
    let c = Config::parse(&text, "c.toml").unwrap();
    assert_eq!(c.server.tls_client_names, ["ops.example", "ci"]);
    // The certificate alone is not enough.
    let e = Config::parse(
        "[server]\ntcp = \"[::1]:9465\"\ntls_cert = \"/c.pem\"\n",
        "c.toml",
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid config c.toml, line 2, column 1: tcp needs TLS: set tls_cert and tls_key (gRPC over TCP is never plain text)"
    );
}

#[test]
fn client_names_need_a_client_ca_and_real_names() {
    let tcp = "[server]\ntcp = \"127.0.0.1:9465\"\ntls_cert = \"/c.pem\"\ntls_key = \"/k.pem\"\n";
    let e = Config::parse(&format!("{tcp}tls_client_names = [\"ops\"]\n"), "c.toml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid config c.toml, line 5, column 1: tls_client_names needs tls_client_ca: names are only trusted on client certificates jpd verified"
    );
    let e = Config::parse(
        &format!("{tcp}tls_client_ca = \"/ca.pem\"\ntls_client_names = [\"ops\", \"ci runner\", \" b\"]\n"),
        "c.toml",
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid config c.toml, line 6, column 1: tls_client_names: \" b\" is not a certificate name (empty, or spaces around it)"
    );
    let e = Config::parse("[server]\ntls_client_names = [\"ops\"]\n", "c.toml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid config c.toml, line 2, column 1: tls_client_names is set but tcp is empty: TLS is only used over TCP"
    );
}

#[test]
fn tls_without_tcp_is_an_error() {
    let e = Config::parse("[server]\n\ntls_key = \"/k.pem\"\n", "c.toml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid config c.toml, line 3, column 1: tls_key is set but tcp is empty: TLS is only used over TCP"
    );
}

#[test]
fn export_section() {
    let c = Config::parse(
        "[export]\nenabled = true\nlisten = \"[::1]:9999\"\n",
        "c.toml",
    )
    .unwrap();
    assert!(c.export.enabled);
    assert_eq!(c.export.listen, "[::1]:9999");
    assert_eq!(c.export.max_profile_seconds, 300);
    let e = Config::parse("[export]\nlisten = \"localhost\"\n", "c.toml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid config c.toml, line 2, column 10: listen = \"localhost\" is not an IP address and port (e.g. \"127.0.0.1:9464\")"
    );
    let c = Config::parse(
        "[export]\nmax_connections = 2\nmax_inflight = 1\nallowed_hosts = [\"node7.example\", \"*\"]\n",
        "c.toml",
    )
    .unwrap();
    assert_eq!((c.export.max_connections, c.export.max_inflight), (2, 1));
    assert_eq!(c.export.allowed_hosts, ["node7.example", "*"]);
    for (text, message) in [
        ("max_connections = 0", "max_connections = 0 is out of range 1..=4096"),
        ("max_inflight = 5000", "max_inflight = 5000 is out of range 1..=1024"),
        ("header_timeout_seconds = 0", "header_timeout_seconds = 0 is out of range 1..=300"),
        ("idle_timeout_seconds = 0", "idle_timeout_seconds = 0 is out of range 1..=3600"),
        (
            "allowed_hosts = [\"a.example:9464\"]",
            "allowed_hosts: \"a.example:9464\" is not a host name (letters, digits, '.', '-', '_'; or \"*\" alone), without a port",
        ),
    ] {
        let e = Config::parse(&format!("[export]\n{text}\n"), "c.toml").unwrap_err();
        assert!(e.to_string().ends_with(message), "{e}");
    }
}

#[test]
fn allow_lists_and_group() {
    let c = Config::parse(
        "[server]\nallow_uids = [1000, 1001]\nallow_gids = [27]\ngroup = \"\"\n",
        "c.toml",
    )
    .unwrap();
    assert_eq!(c.server.allow_uids, [1000, 1001]);
    assert_eq!(c.server.allow_gids, [27]);
    assert_eq!(c.server.group, "");
    let e = Config::parse("[server]\ngroup = \"a b\"\n", "c.toml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid config c.toml, line 2, column 1: group = \"a b\" is not a group name"
    );
    let e = Config::parse("[server]\nallow_uids = [-1]\n", "c.toml").unwrap_err();
    assert!(
        e.to_string().starts_with("invalid config c.toml, line 2,"),
        "{e}"
    );
}

#[test]
fn line_column_counts_characters() {
    assert_eq!(line_column("ab\ncdé\nx", 0), (1, 1));
    assert_eq!(line_column("ab\ncdé\nx", 3), (2, 1));
    // é is two bytes: "x" is at byte 8, the second newline at byte 7.
    assert_eq!(line_column("ab\ncdé\nx", 8), (3, 1));
    assert_eq!(line_column("ab\ncdé\nx", 7), (2, 4));
}

/// A change to one key of the configuration.
type Change = fn(&mut Config);

/// Each key a reload cannot apply, with a change to it: the warning's order.
fn restart_changes() -> [(&'static str, Change); 12] {
    [
        ("server.socket", |c| {
            c.server.socket = "/tmp/other.sock".into()
        }),
        ("server.tcp", |c| c.server.tcp = "127.0.0.1:9465".into()),
        ("kernel.shift", |c| c.kernel.shift += 1),
        ("kernel.irq_ip_sample_every", |c| {
            c.kernel.irq_ip_sample_every += 1
        }),
        ("kernel.irq_ip_samples_per_second", |c| {
            c.kernel.irq_ip_samples_per_second += 1
        }),
        ("kernel.bpf_stats", |c| c.kernel.bpf_stats ^= true),
        ("kernel.read_interval_ms", |c| {
            c.kernel.read_interval_ms += 1
        }),
        ("kernel.jvm_contexts", |c| c.kernel.jvm_contexts ^= true),
        ("kernel.offcpu", |c| c.kernel.offcpu ^= true),
        ("kernel.offcpu_max_switches_per_cpu_per_second", |c| {
            c.kernel.offcpu_max_switches_per_cpu_per_second += 1
        }),
        ("log.level", |c| c.log.level = "debug".into()),
        ("usdt", |c| c.usdt.max_jvms += 1),
    ]
}

#[test]
fn sections_declare_the_keys_a_reload_cannot_apply() {
    let old = Config::default();
    for (key, change) in restart_changes() {
        let mut new = old.clone();
        change(&mut new);
        let keys: Vec<_> = old
            .restart_needed(&new)
            .into_iter()
            .map(|k| k.key)
            .collect();
        assert_eq!(keys, [key], "changing {key}");
    }
    let mut new = old.clone();
    restart_changes()
        .iter()
        .for_each(|(_, change)| change(&mut new));
    let needed = old.restart_needed(&new);
    let keys: Vec<_> = needed.iter().map(|k| k.key).collect();
    let expected: Vec<_> = restart_changes().iter().map(|(key, _)| *key).collect();
    assert_eq!(keys, expected);
    // The values as the warning shows them.
    assert_eq!(
        needed[0],
        RestartNeeded {
            key: "server.socket",
            was: "/run/jp/jpd.sock".into(),
            now: "/tmp/other.sock".into(),
        }
    );
    assert_eq!((needed[2].was.as_str(), needed[2].now.as_str()), ("4", "5"));
    assert_eq!(needed[11].was, format!("{:?}", old.usdt));
}

#[test]
fn reloadable_keys_need_no_restart() {
    let old = Config::default();
    let mut new = old.clone();
    new.kernel.frequency_hz = 499;
    new.server.group = "other".into();
    new.server.allow_uids = vec![1000];
    new.server.allow_gids = vec![27];
    new.server.tls_cert = "/c.pem".into();
    new.server.tls_key = "/k.pem".into();
    new.server.tls_client_ca = "/ca.pem".into();
    new.server.tls_client_names = vec!["ops".into()];
    new.export.enabled = true;
    new.export.listen = "127.0.0.1:9999".into();
    new.export.max_profile_seconds = 60;
    new.pyroscope.enabled = true;
    new.pyroscope.url = "http://pyroscope:4040".into();
    new.pyroscope.interval_s += 1;
    new.pyroscope.tenant_id = "t".into();
    new.export.open_windows = true;
    new.windows.agent_library = "/opt/jp/libjpagent.so".into();
    new.windows.max_seconds = 60;
    new.windows.max_open = 1;
    new.windows.keep = 3;
    new.windows.rotation.enabled = false;
    new.windows.rotation.budget_percent = Percent::new(2.0).unwrap();
    new.windows.rotation.seconds = 5;
    new.windows.rotation.main_class = vec!["com.acme.*".into()];
    new.windows.rotation.uids = vec![1000];
    new.windows.rotation.cgroups = vec!["/system.slice".into()];
    new.windows.rotation.attach_without_agent = true;
    assert_eq!(old.restart_needed(&new), []);
}

#[test]
fn windows_rotation_section() {
    let c = Config::parse(
        "[windows.rotation]\nbudget_percent = 0.5\nseconds = 2\nmain_class = [\"Shop\"]\n",
        "x.toml",
    )
    .unwrap();
    assert_eq!(
        c.windows.rotation,
        RotationConfig {
            budget_percent: Percent::new(0.5).unwrap(),
            seconds: 2,
            main_class: vec!["Shop".into()],
            ..RotationConfig::default()
        }
    );
    for (text, message) in [
        (
            "[windows.rotation]\nbudget_percent = 0\n",
            "invalid config x.toml, line 2, column 18: budget_percent = 0 is out of range 0.001..=50",
        ),
        (
            "[windows.rotation]\nseconds = 0\n",
            "invalid config x.toml, line 2, column 11: seconds = 0 is out of range 1..=3600",
        ),
        (
            "[windows]\nmax_seconds = 60\n[windows.rotation]\nseconds = 61\n",
            "invalid config x.toml, line 4, column 1: seconds = 61 is longer than [windows] max_seconds = 60",
        ),
        (
            "[windows.rotation]\nmax_open = 3\n",
            "invalid config x.toml, line 2, column 1: max_open = 3 is more than [windows] max_open = 2, the host's windows at once",
        ),
        (
            "[windows.rotation]\ncgroups = [\"x\"]\n",
            "invalid config x.toml, line 2, column 11: cgroups: \"x\" is not a cgroup path (it starts with /, as in /proc/PID/cgroup)",
        ),
        (
            "[windows.rotation]\nuids = [-1]\n",
            "invalid config x.toml, line 2, column 9: invalid value: integer `-1`, expected u32",
        ),
    ] {
        let e = Config::parse(text, "x.toml").unwrap_err();
        assert_eq!(e.to_string(), message, "{text}");
    }
}

#[test]
fn windows_section() {
    let c = Config::parse(
        "[windows]\nagent_library = \"/opt/jp/libjpagent.so\"\nmax_seconds = 60\nmax_open = 4\nkeep = 2\n",
        "x.toml",
    )
    .unwrap();
    assert_eq!(
        c.windows,
        WindowsConfig {
            agent_library: "/opt/jp/libjpagent.so".into(),
            max_seconds: 60,
            max_open: 4,
            keep: 2,
            rotation: RotationConfig::default(),
        }
    );
    assert_eq!(
        (c.windows.max_seconds, Config::default().windows.max_seconds),
        (60, 300)
    );
    for (text, message) in [
        (
            "[windows]\nmax_seconds = 3601\n",
            "invalid config x.toml, line 2, column 15: max_seconds = 3601 is out of range 1..=3600",
        ),
        (
            "[windows]\nmax_open = 0\n",
            "invalid config x.toml, line 2, column 12: max_open = 0 is out of range 1..=64",
        ),
        (
            "[windows]\nkeep = 0\n",
            "invalid config x.toml, line 2, column 8: keep = 0 is out of range 1..=1000",
        ),
        (
            "[windows]\nkeep = \"8\"\n",
            "invalid config x.toml, line 2, column 8: invalid type: string \"8\", expected u32",
        ),
        (
            "[windows]\nmax_windows = 3\n",
            "invalid config x.toml, line 2, column 1: unknown field `max_windows`, expected one of `agent_library`, `max_seconds`, `max_open`, `keep`, `rotation`",
        ),
    ] {
        let e = Config::parse(text, "x.toml").unwrap_err();
        assert_eq!(e.to_string(), message, "{text}");
    }
    let e = Config::parse("[export]\nopen_windows = 1\n", "x.toml").unwrap_err();
    assert!(e.to_string().contains("line 2"), "{e}");
}
