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

#[cfg(test)]
mod tests {
    /// An export with time off CPU: the page has the four types and the selector, the
    /// off-CPU graphs say how much idle time jpd left out and how to see it.
    #[test]
    fn an_export_with_time_off_cpu_has_every_sample_type() {
        let json = concat!(
            "{\"format\": \"jp-mct/1\", \"bba\": \"default\", \"cpu_unit\": \"nanoseconds\", ",
            "\"offcpu_idle_hidden_ns\": 1500000, \"root\": {\"children\": [\n",
            "{\"method\": \"W.a()V\", \"calls\": 1, \"bytecodes\": 3, \"cpu\": {\"user\": 20, \"kernel\": 0}, ",
            "\"offcpu\": {\"ns\": 70, \"kinds\": {\"sleep\": 70}, \"functions\": {\"do_nanosleep\": 70}}, ",
            "\"children\": []}\n]}}\n"
        );
        let page = String::from_utf8(super::flame_page(json.as_bytes(), 7).unwrap()).unwrap();
        assert!(
            page.contains(
                "{\"types\":[\"bytecodes\",\"cpu\",\"offcpu\",\"wall\"],\"default\":\"bytecodes\","
            ),
            "{page}"
        );
        assert!(page.contains("<select id=\"type\""), "{page}");
        assert!(
            page.contains("\"names\":[\"[smaller frames]\",\"W.a()\",\"off-CPU: sleep\",\"do_nanosleep\"],\"frames\":[[1,0,70,1,70,0],[2,1,70,-1,70,0],[3,2,70,-1,70,70]]"),
            "{page}"
        );
        assert_eq!(
            page.matches(" · 1.500 ms off CPU of idle threads (waiting for work) not shown; --all shows them · from jpd").count(),
            2,
            "{page}"
        );
    }
}
