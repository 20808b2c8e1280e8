//! Generates the OTLP profiles messages (opentelemetry-proto v1.10.0, `v1development`)
//! from jp's subset of the upstream files in proto/opentelemetry/.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "../proto/opentelemetry/proto/common/v1/common.proto",
        "../proto/opentelemetry/proto/resource/v1/resource.proto",
        "../proto/opentelemetry/proto/profiles/v1development/profiles.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    prost_build::Config::new().compile_protos(&protos, &["../proto"])?;
    Ok(())
}
