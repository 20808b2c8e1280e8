//! Phase 4, lay out: the new offset of every instruction and of its injected prefix,
//! widening 16-bit branches (goto → goto_w; a conditional → the inverted branch over a
//! goto_w) until every offset fits; then where the catch-all handler and the stubs go.

use super::super::insn::{self, Flow};
use super::inject::Injected;
use super::method::Method;
use super::ops::local_op_len;
use super::parse::CodeAttr;
use super::plan::{Plan, Sites};

/// Where everything goes in the new code (buffers reused across methods).
#[derive(Default)]
pub(super) struct Layout {
    /// Per instruction: its 16-bit branch is widened.
    pub wide: Vec<bool>,
    /// Per instruction, and the code's end: the new offset of its injected prefix (where
    /// branches to it go).
    pub new_off: Vec<u32>,
    /// Per instruction: the new offset of the original instruction itself.
    pub ins_off: Vec<u32>,
    /// Handlers (instruction indices) that get a stub: they catch anything and cover
    /// their own first instruction.
    pub self_cover: Vec<u32>,
    /// The end of the instructions: the catch-all handler's offset.
    pub end: u32,
    /// The offset of the first stub (after the catch-all handler).
    pub stubs_at: u32,
    /// The new code's length.
    pub total: u32,
}

impl Layout {
    /// The stub of `self_cover[j]`: a 5-byte `goto_w`.
    pub fn stub(&self, j: usize) -> u32 {
        self.stubs_at + 5 * j as u32
    }
}

/// Lays the code out. False: the code grows past what any widening can fix.
pub(super) fn lay_out(mt: &Method, injected: &Injected, plan: &Plan, out: &mut Layout) -> bool {
    let n = mt.code.insns.len();
    out.wide.clear();
    out.wide.extend(
        mt.code
            .insns
            .iter()
            .map(|ins| mt.input.force_wide && ins.len == 3 && ins.tn == 1),
    );
    out.new_off.clear();
    out.new_off.resize(n + 1, 0);
    out.ins_off.clear();
    out.ins_off.resize(n, 0);
    out.end = loop {
        let Some(end) = place(mt, injected, out) else {
            return false;
        };
        if !(end > 0x7FFF && widen_far_branches(mt, out)) {
            break end;
        }
    };
    let catch_all_code = if plan.catch_all {
        4 + local_op_len(plan.ctx)
            + if plan.pending {
                local_op_len(plan.acc)
            } else {
                0
            }
    } else {
        0
    };
    self_covering_handlers(mt.attr, mt.code.handlers, &mut out.self_cover);
    out.stubs_at = out.end + catch_all_code as u32;
    out.total = out.stub(out.self_cover.len());
    true
}

/// One placement with the current widenings: the end of the instructions (None: over
/// 1 MiB, hopeless).
fn place(mt: &Method, injected: &Injected, out: &mut Layout) -> Option<u32> {
    let mut pos = injected.entry.len() as u64;
    for (i, ins) in mt.code.insns.iter().enumerate() {
        out.new_off[i] = pos as u32;
        pos += injected.before(i).len() as u64;
        out.ins_off[i] = pos as u32;
        pos += match ins.op {
            insn::TABLESWITCH | insn::LOOKUPSWITCH => {
                let rest = ins.len - 1 - insn::switch_pad(ins.off);
                1 + insn::switch_pad(pos as u32) + rest
            }
            insn::GOTO | insn::JSR if out.wide[i] => 5,
            _ if ins.flow == Flow::Cond && out.wide[i] => 8,
            _ => ins.len,
        } as u64;
        if pos > 0x10_0000 {
            return None;
        }
    }
    out.new_off[mt.code.insns.len()] = pos as u32;
    Some(pos as u32)
}

/// Widens every 16-bit branch whose distance no longer fits; whether one was.
fn widen_far_branches(mt: &Method, out: &mut Layout) -> bool {
    let mut changed = false;
    for (i, ins) in mt.code.insns.iter().enumerate() {
        if ins.len == 3 && ins.tn == 1 && !out.wide[i] {
            let t = mt.code.targets[ins.t0 as usize] as usize;
            let d = out.new_off[t] as i64 - out.ins_off[i] as i64;
            if d < i16::MIN as i64 || d > i16::MAX as i64 {
                out.wide[i] = true;
                changed = true;
            }
        }
    }
    changed
}

/// Handlers that catch anything and cover their own first instruction (javac's handler
/// around a synchronized block's monitorexit). Their injected first block (caught, tick,
/// count: calls, which may throw) must not be covered by the handler itself, or C1
/// refuses the method ("exception handler covers itself") and it runs interpreted until
/// C2 takes it, much later. Nor may it be left to the catch-all: that handler is also
/// reached with no monitor held, and HotSpot then finds the monitors unbalanced and
/// compiles the method with neither compiler. So a 5-byte stub (`goto_w` to the
/// original handler code) catches what the injected block throws, with the monitors of
/// the handler: one stub per such handler, after the catch-all.
fn self_covering_handlers(attr: &CodeAttr, handlers: &[(u32, u32, u32)], out: &mut Vec<u32>) {
    out.clear();
    for (k, &(sp, ep, hp)) in handlers.iter().enumerate() {
        if (sp..ep).contains(&hp) && attr.catch_type(k) == [0, 0] && !out.contains(&hp) {
            out.push(hp);
        }
    }
}

/// What the output phases read: the method, its plan and its layout.
pub(super) struct Parts<'a> {
    pub method: &'a Method<'a>,
    pub plan: &'a Plan,
    pub sites: &'a Sites,
    pub layout: &'a Layout,
}
