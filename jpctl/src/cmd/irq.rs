//! `jpctl irq`: hard-IRQ handler hits and softirqs since the last reset.

use clap::Args;
use jp_proto::v1::GetIrqStatsRequest;

use super::destination::Destination;
use super::rpc;
use crate::client::Client;
use crate::output::{self, irq};

#[derive(Args, Debug)]
pub struct IrqArgs {
    #[arg(long)]
    pub json: bool,
}

pub async fn run(c: &mut Client, a: IrqArgs) -> anyhow::Result<()> {
    let s = c
        .get_irq_stats(GetIrqStatsRequest {})
        .await
        .map_err(rpc)?
        .into_inner();
    let text = if a.json {
        output::to_json(&irq::irq_json(&s))
    } else {
        irq::irq_text(&s)
    };
    Destination::Stdout.write(text.as_bytes(), "")
}
