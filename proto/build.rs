//! Generates the jp.v1 client and server, and a file descriptor set for gRPC
//! reflection, from proto/jp/v1/*.proto.
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
    Ok(())
}
