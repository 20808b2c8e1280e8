//! Every pprof and folded-stacks file jpd writes of a JVM's Method Call Tree (HTTP, gRPC,
//! the Pyroscope pusher), written by jp-mct's writers: what they folded below their depth
//! cap is counted here as a refusal, so `jpctl status` says that a profile was shortened
//! and how often.

use std::io::{self, Write};

use jp_mct::{Mct, PprofOptions};

use crate::refusals::{self, Refusal};

/// A context deeper than `jp_mct::MAX_STACK_FRAMES` went into its folded sample.
pub const DEPTH_CAPPED: Refusal = Refusal::new("pprof", "depth_capped");

/// The same in a folded-stacks export.
pub const FOLDED_DEPTH_CAPPED: Refusal = Refusal::new("folded", "depth_capped");

/// [`jp_mct::write_folded`], counting the contexts folded below the depth cap.
pub fn write_folded(t: &Mct, w: &mut dyn Write) -> io::Result<()> {
    let folded = jp_mct::write_folded_folding(t, w)?;
    refusals::count(FOLDED_DEPTH_CAPPED, folded);
    Ok(())
}

/// [`jp_mct::write_pprof`], counting the contexts folded below the depth cap.
pub fn write_pprof(t: &Mct, options: PprofOptions<'_>, w: &mut dyn Write) -> io::Result<()> {
    let folded = jp_mct::write_pprof_folding(t, options, w)?;
    refusals::count(DEPTH_CAPPED, folded);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use jp_mct::MethodInfo;

    #[test]
    fn folded_contexts_are_counted() {
        let depth = jp_mct::MAX_STACK_FRAMES + 3;
        let mut t = Mct::new("precise");
        let mut parent = 0;
        for d in 0..depth {
            let info = MethodInfo {
                name: format!("m{d}").into(),
                file: None,
            };
            parent = t.add(parent, info, 1, 1);
        }
        let before = refusals::get(DEPTH_CAPPED);
        write_pprof(&t, PprofOptions::default(), &mut Vec::new()).unwrap();
        // No other test of this binary writes a tree deeper than the cap.
        assert_eq!(refusals::get(DEPTH_CAPPED) - before, 3);
        let before = refusals::get(FOLDED_DEPTH_CAPPED);
        write_folded(&t, &mut Vec::new()).unwrap();
        assert_eq!(refusals::get(FOLDED_DEPTH_CAPPED) - before, 3);
    }
}
