//! `jpctl reset`: jpd counts from zero, for every client.

use jp_proto::v1::ResetRequest;

use super::destination::Destination;
use super::rpc;
use crate::client::Client;

pub async fn run(c: &mut Client) -> anyhow::Result<()> {
    c.reset(ResetRequest {}).await.map_err(rpc)?;
    Destination::Stdout.write(b"counts reset: jpd counts from zero for every client\n", "")
}
