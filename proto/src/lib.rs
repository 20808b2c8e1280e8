//! The generated `jp.v1` gRPC API.
