//! `jpctl jvm export --format html`: the flame graph page of jpd's jp-mct/1 export (the
//! other formats are jpd's bytes as they are). With jpd's CPU per context in the export,
//! the page carries every sample type it has (bytecodes, cpu, offcpu, wall) and a selector,
//! as jpd's live page does; idle threads' time off CPU is left out unless `--all`, and
//! the page says how much.

use anyhow::Context;

/// The flame graph of a jp-mct/1 export; it opens on the tree's bytecodes.
pub fn flame_page(json: &[u8], pid: u32) -> anyhow::Result<Vec<u8>> {
    let (t, cpu) = jp_mct::read_json_cpu(json).context("jpd's json export")?;
    let title = format!("jp method call tree of pid {pid}");
    let mut graphs = jp_mct::typed_graphs(&t, cpu.as_ref(), &title, "--all shows them");
    for (_, g) in &mut graphs {
        g.subtitle.push_str(" · from jpd");
    }
    let mut page = Vec::new();
    jp_mct::write_flame_html_types(
        &graphs,
        jp_mct::SampleType::Bytecodes,
        jp_mct::DEFAULT_MIN_SHARE,
        &mut page,
    )?;
    Ok(page)
}
