//! Builds jp's eBPF object (`jp-ebpf`, binary `jp-probes`) for the BPF target with the
//! nightly toolchain (aya-template style); `src/probes.rs` embeds it from
//! `$OUT_DIR/jp-probes`. Needs `rustup`'s nightly with `rust-src` and `bpf-linker`
//! (`cargo xtask setup` installs them).
use anyhow::Context as _;
use aya_build::{Package, Toolchain};

fn main() -> anyhow::Result<()> {
    let manifest_dir =
        std::env::var("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR not set by cargo")?;
    let root_dir = std::path::Path::new(&manifest_dir).join("../jp-ebpf");
    let root_dir = root_dir
        .canonicalize()
        .with_context(|| format!("jp-ebpf not found at {}", root_dir.display()))?;
    let root_dir = root_dir.to_str().context("jp-ebpf path is not UTF-8")?;
    aya_build::build_ebpf(
        [Package {
            name: "jp-ebpf",
            root_dir,
            ..Default::default()
        }],
        Toolchain::Custom("nightly"),
    )
}
