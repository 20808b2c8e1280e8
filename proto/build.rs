//! Generates the jp.v1 client and server, and a file descriptor set for gRPC
//! reflection, from proto/jp/v1/*.proto; and the OTLP profiles collector's client
//! (opentelemetry-proto v1.10.0), whose messages are jp-mct's.
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let protos = [
        "jp/v1/jp.proto",
        "jp/v1/jvm.proto",
        "jp/v1/kernel.proto",
        "jp/v1/windows.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    tonic_prost_build::configure()
        .file_descriptor_set_path(out_dir.join("jp_v1_descriptor.bin"))
        .compile_protos(&protos, &["."])?;
    let otlp = "opentelemetry/proto/collector/profiles/v1development/profiles_service.proto";
    println!("cargo:rerun-if-changed={otlp}");
    tonic_prost_build::configure()
        .build_server(false)
        .extern_path(
            ".opentelemetry.proto.profiles.v1development",
            "::jp_mct::otlp::proto::profiles::v1development",
        )
        .extern_path(
            ".opentelemetry.proto.common.v1",
            "::jp_mct::otlp::proto::common::v1",
        )
        .extern_path(
            ".opentelemetry.proto.resource.v1",
            "::jp_mct::otlp::proto::resource::v1",
        )
        .compile_protos(&[otlp], &["."])?;
    Ok(())
}
