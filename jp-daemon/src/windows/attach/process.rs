//! What a JVM's `/proc` entries say about reaching it, parsed without touching it:
//! its credentials and pid in its own namespace (`status`), its main class and whether
//! attach was disabled (`cmdline`, `environ`), and its Java version (the JDK's `release`
//! file beside the `libjvm.so` it maps).

/// `/proc/PID/status`: effective uid and gid, and the pid in the innermost PID namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Credentials {
    pub uid: u32,
    pub gid: u32,
    pub nspid: u32,
}

/// `Uid:`/`Gid:` carry real, effective, saved and file-system ids; `NStgid:` the
/// process's pid in each PID namespace from jpd's down, the last its own.
pub fn parse_status(status: &str, pid: u32) -> Option<Credentials> {
    let field = |name: &str, index: usize| -> Option<u32> {
        let line = status.lines().find_map(|l| l.strip_prefix(name))?;
        line.split_whitespace().nth(index)?.parse().ok()
    };
    let nspid = status
        .lines()
        .find_map(|l| l.strip_prefix("NStgid:"))
        .and_then(|l| l.split_whitespace().last()?.parse().ok())
        .unwrap_or(pid);
    Some(Credentials {
        uid: field("Uid:", 1)?,
        gid: field("Gid:", 1)?,
        nspid,
    })
}

/// Launcher options whose value is the next argument.
const OPTIONS_WITH_VALUE: [&str; 14] = [
    "-cp",
    "-classpath",
    "--class-path",
    "-p",
    "--module-path",
    "--upgrade-module-path",
    "--add-modules",
    "--limit-modules",
    "--add-reads",
    "--add-exports",
    "--add-opens",
    "--patch-module",
    "--enable-native-access",
    "--source",
];

/// The JVM's options and its main class (or jar, or module) in a `java` command line,
/// as `sun.java.command`'s first word names it: what follows `-jar` or `-m`, else the
/// first argument that is not an option. A command line of another launcher (a program
/// embedding the JVM) has no main class: its program's name stands for it.
pub fn split_command_line(args: &[String]) -> (Vec<&str>, String) {
    let mut options = Vec::new();
    let mut rest = args.iter().skip(1);
    while let Some(arg) = rest.next() {
        let a = arg.as_str();
        if a == "-jar" || a == "-m" || a == "--module" {
            return (options, rest.next().cloned().unwrap_or_default());
        }
        if let Some(module) = a.strip_prefix("--module=") {
            return (options, module.to_string());
        }
        if !a.starts_with('-') {
            return (options, a.to_string());
        }
        options.push(a);
        if OPTIONS_WITH_VALUE.contains(&a) {
            if let Some(value) = rest.next() {
                options.push(value);
            }
        }
    }
    let program = args
        .first()
        .map(|p| p.rsplit('/').next().unwrap_or(p).to_string())
        .unwrap_or_default();
    (options, program)
}

/// The NUL-separated arguments of `/proc/PID/cmdline`.
pub fn split_nul(raw: &[u8]) -> Vec<String> {
    raw.split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// Where HotSpot reads options, in the order it applies them (a later one wins):
/// `JAVA_TOOL_OPTIONS`, then `JDK_JAVA_OPTIONS` (which the `java` launcher puts before
/// the command line's), the command line, `_JAVA_OPTIONS`.
const ENV_BEFORE: [&str; 2] = ["JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS"];
const ENV_AFTER: &str = "_JAVA_OPTIONS";

/// Where `-XX:+DisableAttachMechanism` took effect, if it did (the last of `+` and `-`
/// wins): "the command line" or the variable's name.
pub fn attach_disabled_by(cmdline_options: &[&str], environ: &[u8]) -> Option<String> {
    let env_value = |name: &str| -> String {
        environ
            .split(|&b| b == 0)
            .find_map(|entry| {
                let entry = String::from_utf8_lossy(entry);
                entry
                    .strip_prefix(name)
                    .and_then(|v| v.strip_prefix('='))
                    .map(str::to_string)
            })
            .unwrap_or_default()
    };
    let mut last: Option<(bool, String)> = None;
    let mut see = |tokens: &mut dyn Iterator<Item = &str>, origin: &str| {
        for t in tokens {
            match t {
                "-XX:+DisableAttachMechanism" => last = Some((true, origin.to_string())),
                "-XX:-DisableAttachMechanism" => last = Some((false, origin.to_string())),
                _ => {}
            }
        }
    };
    for name in ENV_BEFORE {
        see(&mut env_value(name).split_whitespace(), name);
    }
    see(&mut cmdline_options.iter().copied(), "the command line");
    see(&mut env_value(ENV_AFTER).split_whitespace(), ENV_AFTER);
    last.filter(|(disabled, _)| *disabled)
        .map(|(_, origin)| origin)
}

/// `JAVA_VERSION="17.0.15"` from a JDK's `release` file.
pub fn release_java_version(release: &str) -> Option<String> {
    let line = release
        .lines()
        .find_map(|l| l.trim().strip_prefix("JAVA_VERSION="))?;
    let v = line.trim().trim_matches('"');
    (!v.is_empty()).then(|| v.to_string())
}

/// The feature release of a Java version string: 17 for "17.0.15", 8 for "1.8.0_392",
/// 25 for "25".
pub fn feature_version(version: &str) -> Option<u32> {
    let v = version.strip_prefix("1.").unwrap_or(version);
    let digits: String = v.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// One key of the JVM's system properties as the `properties` command prints them
/// (`java.util.Properties` text: `key=value`, `:`, `=` and spaces escaped in keys).
pub fn property(text: &str, key: &str) -> Option<String> {
    let escaped = key.replace(':', "\\:");
    text.lines().find_map(|l| {
        let l = l.trim_start();
        let rest = l.strip_prefix(&escaped)?;
        let value = rest.strip_prefix('=').or_else(|| rest.strip_prefix(':'))?;
        Some(value.trim().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn status_fields() {
        let status = "Name:\tjava\nUid:\t0\t65534\t65534\t65534\nGid:\t1\t65533\t1\t1\n\
                      NStgid:\t4242\t1\nNSpid:\t4242\t1\n";
        assert_eq!(
            parse_status(status, 4242),
            Some(Credentials {
                uid: 65534,
                gid: 65533,
                nspid: 1
            })
        );
        let host = "Uid:\t5\t5\t5\t5\nGid:\t6\t6\t6\t6\nNStgid:\t77\n";
        assert_eq!(parse_status(host, 77).map(|c| c.nspid), Some(77));
        assert_eq!(parse_status("Name:\tx\n", 1), None);
    }

    #[test]
    fn main_classes_as_the_launcher_reads_them() {
        let cases = [
            ("java -cp /a:/b -Xmx1g com.x.Main arg -jar y", "com.x.Main"),
            (
                "java -XX:+UseG1GC -jar /srv/app.jar --port 1",
                "/srv/app.jar",
            ),
            ("java --module-path m -m app/app.Main", "app/app.Main"),
            ("java --module=app/app.Main", "app/app.Main"),
            ("java --class-path x --add-opens a=b Hello", "Hello"),
            ("/opt/bin/embedder -Xmx1g", "embedder"),
        ];
        for (line, main) in cases {
            assert_eq!(split_command_line(&args(line)).1, main, "{line}");
        }
        let a = args("java -Xss1m -XX:+DisableAttachMechanism Main -XX:-DisableAttachMechanism");
        let (options, main) = split_command_line(&a);
        assert_eq!(options, ["-Xss1m", "-XX:+DisableAttachMechanism"]);
        assert_eq!(main, "Main");
        assert_eq!(split_nul(b"java\0-cp\0x\0\0"), ["java", "-cp", "x"]);
    }

    #[test]
    fn attach_disabled_the_last_setting_wins() {
        let env = b"PATH=/bin\0JAVA_TOOL_OPTIONS=-Xss1m -XX:+DisableAttachMechanism\0";
        assert_eq!(
            attach_disabled_by(&[], env).as_deref(),
            Some("JAVA_TOOL_OPTIONS")
        );
        assert_eq!(
            attach_disabled_by(&["-XX:-DisableAttachMechanism"], env),
            None
        );
        assert_eq!(
            attach_disabled_by(&["-XX:+DisableAttachMechanism"], b"").as_deref(),
            Some("the command line")
        );
        let after = b"_JAVA_OPTIONS=-XX:+DisableAttachMechanism\0";
        assert_eq!(
            attach_disabled_by(&["-XX:-DisableAttachMechanism"], after).as_deref(),
            Some("_JAVA_OPTIONS")
        );
        assert_eq!(
            attach_disabled_by(&[], b"MY_JAVA_TOOL_OPTIONS=-XX:+DisableAttachMechanism\0"),
            None
        );
    }

    #[test]
    fn versions() {
        let release = "IMPLEMENTOR=\"Eclipse Adoptium\"\nJAVA_VERSION=\"25\"\n";
        assert_eq!(release_java_version(release).as_deref(), Some("25"));
        assert_eq!(release_java_version("X=1\n"), None);
        assert_eq!(feature_version("17.0.15"), Some(17));
        assert_eq!(feature_version("1.8.0_392"), Some(8));
        assert_eq!(feature_version("25"), Some(25));
        assert_eq!(feature_version("x"), None);
        let props = "#Sun\njava.vm.specification.version=17\nfile.separator=/\n";
        assert_eq!(
            property(props, "java.vm.specification.version").as_deref(),
            Some("17")
        );
        assert_eq!(property(props, "java.vm"), None);
    }
}
