//! A gRPC client that is not ours calls every RPC: Python's grpcio (from PyPI, in a
//! venv under the target directory that this test creates) with stubs that
//! grpcio-tools generates from proto/jp/v1/*.proto. The kernel RPCs must answer with
//! real data; the JVM RPCs answer about a JVM jpd holds (OK), or NOT_FOUND when it
//! holds none.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::fleet::{target_dir, tool};
use crate::support::jpd::Jpd;
use serde_json::Value;

const PROTO_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../proto");
const CLIENT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/fleet_grpc/client.py"
);

fn run(c: &mut Command, what: &str) {
    let out = c.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The official OpenTelemetry protocol definitions the OTLP peer is built from:
/// pinned, since v1development changes between releases.
pub const OPENTELEMETRY_PROTO: &str = "opentelemetry-proto==1.45.2";

/// The venv with grpcio, grpcio-tools and opentelemetry-proto (pip from PyPI the first
/// time); a package pip cannot install fails the test, naming it.
pub fn venv() -> PathBuf {
    // The tests that use it run in parallel: one creates the venv, the others wait.
    static CREATING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _creating = CREATING.lock().unwrap_or_else(|p| p.into_inner());
    let dir = target_dir().join("fleet-venv");
    let python = dir.join("bin/python3");
    let ok = python.exists()
        && Command::new(&python)
            .args([
                "-c",
                "import grpc, grpc_tools, opentelemetry.proto.collector.profiles.v1development",
            ])
            .output()
            .is_ok_and(|o| o.status.success());
    if !ok {
        let system = tool("python3", "python3-venv");
        run(
            Command::new(system).args(["-m", "venv"]).arg(&dir),
            "python3 -m venv (apt-get install python3-venv)",
        );
        run(
            // `python -m pip`: the venv's own pip even in a copied venv, whose `bin/pip`
            // still names the original's interpreter.
            Command::new(&python).args([
                "-m",
                "pip",
                "install",
                "-q",
                "grpcio",
                "grpcio-tools",
                OPENTELEMETRY_PROTO,
            ]),
            &format!("pip install grpcio grpcio-tools '{OPENTELEMETRY_PROTO}' (needs PyPI)"),
        );
    }
    python
}

/// Python stubs for every .proto of jp.v1, generated fresh.
fn generate(python: &Path, out: &Path) {
    let protos: Vec<PathBuf> = std::fs::read_dir(Path::new(PROTO_DIR).join("jp/v1"))
        .expect("proto/jp/v1")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "proto"))
        .collect();
    assert!(!protos.is_empty());
    run(
        Command::new(python)
            .args(["-m", "grpc_tools.protoc"])
            .arg(format!("-I{PROTO_DIR}"))
            .arg(format!("--python_out={}", out.display()))
            .arg(format!("--grpc_python_out={}", out.display()))
            .args(&protos),
        "grpc_tools.protoc",
    );
}

/// The rpc names the .proto files declare for service Jp.
fn declared_rpcs() -> BTreeSet<String> {
    let text =
        std::fs::read_to_string(Path::new(PROTO_DIR).join("jp/v1/jp.proto")).expect("jp.proto");
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix("rpc "))
        .filter_map(|l| l.split('(').next())
        .map(|n| n.trim().to_string())
        .collect()
}

#[test]
fn python_grpcio_calls_every_rpc() {
    let python = venv();
    let gen = tempfile::tempdir().expect("temp dir");
    generate(&python, gen.path());

    let _one = crate::support::exclusive();
    let jpd = Jpd::start("");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let out = Command::new(&python)
        .arg(CLIENT)
        .arg(&jpd.socket)
        .env("PYTHONPATH", gen.path())
        .output()
        .expect("run the Python client");
    check_every_rpc(out);
    jpd.stop();
}

/// The same calls over TCP with TLS, grpc-core presenting a client certificate to a
/// jpd that requires one (server.tls_client_ca and tls_client_names).
#[test]
fn python_grpcio_calls_every_rpc_over_mutual_tls() {
    let python = venv();
    let gen = tempfile::tempdir().expect("temp dir");
    generate(&python, gen.path());

    let ca = crate::support::tls::Ca::new("jp test CA");
    let files = tempfile::tempdir().expect("temp dir");
    let ca_pem = ca.write(files.path(), "ca.pem");
    let (cert, key) = ca.server().write(files.path(), "jpd");
    let (client_cert, client_key) = ca
        .client(&["python.example"], "python client")
        .write(files.path(), "client");
    let addr = format!("127.0.0.1:{}", crate::support::jpd::free_port());
    let q = |p: &Path| format!("{:?}", p.display().to_string());
    let server = format!(
        "tcp = \"{addr}\"\ntls_cert = {}\ntls_key = {}\ntls_client_ca = {}\ntls_client_names = [\"python.example\"]\n",
        q(&cert),
        q(&key),
        q(&ca_pem)
    );

    let _one = crate::support::exclusive();
    let jpd = Jpd::start_with("", &[], &server);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let out = Command::new(&python)
        .arg(CLIENT)
        .arg("--tls")
        .arg(&addr)
        .args([&ca_pem, &client_cert, &client_key])
        .env("PYTHONPATH", gen.path())
        .output()
        .expect("run the Python client");
    check_every_rpc(out);
    jpd.stop();
}

/// Every rpc of jp.proto was called and answered as it should.
fn check_every_rpc(out: std::process::Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let calls: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let called: BTreeSet<String> = calls
        .iter()
        .map(|c| c["method"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(called, declared_rpcs(), "every rpc of jp.proto was called");

    let by_name = |n: &str| {
        calls
            .iter()
            .find(|c| c["method"] == n)
            .unwrap_or_else(|| panic!("{n} not called"))
    };
    for kernel in [
        "GetStatus",
        "GetKernelProfile",
        "GetIrqStats",
        "Reset",
        "Watch",
    ] {
        assert_eq!(
            by_name(kernel)["code"],
            "OK",
            "{kernel}: {}",
            by_name(kernel)
        );
    }
    let status = &by_name("GetStatus")["summary"];
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(status["kernel"]["attached"], true);
    // protobuf's JSON mapping writes 64-bit integers as strings.
    let total: u64 = by_name("GetKernelProfile")["summary"]["samples"]["total"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    assert!(total > 0, "{}", by_name("GetKernelProfile"));
    assert!(
        by_name("Watch")["summary"]["kernel"].is_object(),
        "{}",
        by_name("Watch")
    );
    // The JVM methods ask about the first JVM ListJvms names: with one they must
    // answer it, without any they must say NOT_FOUND.
    // The window methods: a default ProfileJvm asks for a window of 0 s, which is refused
    // before any JVM is looked at; no window was opened, so none is listed or found.
    let windows = [
        ("ProfileJvm", "FAILED_PRECONDITION"),
        ("ListJvmWindows", "OK"),
        ("GetJvmWindow", "NOT_FOUND"),
    ];
    for (method, want) in windows {
        assert_eq!(
            by_name(method)["code"],
            want,
            "{method}: {}",
            by_name(method)
        );
    }
    assert!(
        by_name("ProfileJvm")["summary"]
            .as_str()
            .is_some_and(|s| s.contains("at least 1 second")),
        "{}",
        by_name("ProfileJvm")
    );
    for c in calls
        .iter()
        .filter(|c| !windows.iter().any(|(m, _)| c["method"] == *m))
    {
        let code = c["code"].as_str().unwrap_or("");
        let want = if c["pid"] == 0
            && c["method"] != "ListJvms"
            && ![
                "GetStatus",
                "GetKernelProfile",
                "GetIrqStats",
                "Reset",
                "Watch",
            ]
            .contains(&c["method"].as_str().unwrap_or(""))
        {
            "NOT_FOUND"
        } else {
            "OK"
        };
        assert_eq!(code, want, "{}: {}", c["method"], c["summary"]);
    }
}
