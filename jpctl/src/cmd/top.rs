//! `jpctl top`: the live full-screen view ([`crate::top`]).

use clap::Args;

use crate::client::Client;

#[derive(Args, Debug)]
pub struct TopArgs {
    /// Refresh interval in milliseconds.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub interval: u32,
}

pub async fn run(c: Client, a: TopArgs) -> anyhow::Result<()> {
    crate::top::run(c, a.interval).await
}
