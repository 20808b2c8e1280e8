//! `jpctl status`: what jpd has attached, samples seen, events lost, eBPF run time.

use clap::Args;
use jp_proto::v1::GetStatusRequest;

use super::destination::Destination;
use super::rpc;
use crate::client::Client;
use crate::output::{self, status};

#[derive(Args, Debug)]
pub struct StatusArgs {
    #[arg(long)]
    pub json: bool,
}

pub async fn run(c: &mut Client, a: StatusArgs) -> anyhow::Result<()> {
    let s = c
        .get_status(GetStatusRequest {})
        .await
        .map_err(rpc)?
        .into_inner();
    let text = if a.json {
        output::to_json(&status::status_json(&s))
    } else {
        status::status_text(&s)
    };
    Destination::Stdout.write(text.as_bytes(), "")
}
