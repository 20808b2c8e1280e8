//! `jpctl jvm export --format html`: the flame graph page of jpd's jp-mct/1 export (the
//! other formats are jpd's bytes as they are).

use anyhow::Context;

/// The flame graph of a jp-mct/1 export.
pub fn flame_page(json: &[u8], pid: u32) -> anyhow::Result<Vec<u8>> {
    let t = jp_mct::read_json(json).context("jpd's json export")?;
    let mut g = jp_mct::FlameTree::from_mct(&t, &format!("jp method call tree of pid {pid}"));
    g.subtitle.push_str(" · from jpd");
    let mut page = Vec::new();
    jp_mct::write_flame_html(&g, jp_mct::DEFAULT_MIN_SHARE, &mut page)?;
    Ok(page)
}
