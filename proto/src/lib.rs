//! The generated `jp.v1` gRPC API, shared by jpd (server) and jpctl (client).
//!
//! The `.proto` files are in `proto/jp/v1/`; they are the API's documentation.

pub mod v1 {
    #![allow(clippy::all, clippy::pedantic)]
    tonic::include_proto!("jp.v1");

    /// Encoded `FileDescriptorSet` of every jp.v1 file, for gRPC reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("jp_v1_descriptor");
}

/// Full gRPC service name, as health checks and reflection know it.
pub const SERVICE_NAME: &str = "jp.v1.Jp";

/// The OTLP profiles collector service (opentelemetry-proto v1.10.0, `v1development`):
/// its client, which jpd's OTLP exporter calls; the messages are `jp_mct::otlp`'s.
pub mod otlp_collector {
    #![allow(clippy::all, clippy::pedantic)]
    tonic::include_proto!("opentelemetry.proto.collector.profiles.v1development");
}
