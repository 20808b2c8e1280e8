//! Phase 6, exception table: the original entries first (remapped; a self-covering
//! handler's entry split around its injected first block, which its stub covers), then
//! the catch-all's ranges last.

use super::super::initthis;
use super::super::reader::put_u16;
use super::layout::Parts;

/// The exception table being written: its entries and their count.
struct Table<'o> {
    out: &'o mut Vec<u8>,
    n: u32,
}

impl Table<'_> {
    fn entry(&mut self, range: (u32, u32), handler: u32, catch_type: &[u8]) {
        put_u16(self.out, range.0 as u16);
        put_u16(self.out, range.1 as u16);
        put_u16(self.out, handler as u16);
        self.out.extend_from_slice(catch_type);
        self.n += 1;
    }
}

/// Appends the exception table. Returns where each original entry went (its index in the
/// new table, for type annotations), or None if the table has too many entries.
pub(super) fn write_exception_table(p: &Parts, out: &mut Vec<u8>) -> Option<Vec<u16>> {
    let count_at = out.len();
    put_u16(out, 0);
    let mut table = Table {
        out: &mut *out,
        n: 0,
    };
    let moved = original_entries(p, &mut table);
    if p.plan.catch_all {
        catch_all_entries(p, &mut table);
    }
    let n = table.n;
    if n > 0xFFFF {
        return None;
    }
    out[count_at..count_at + 2].copy_from_slice(&(n as u16).to_be_bytes());
    Some(moved)
}

fn original_entries(p: &Parts, table: &mut Table) -> Vec<u16> {
    let (layout, handlers) = (p.layout, p.method.code.handlers);
    // Where each original entry went (a self-covering one becomes several).
    let mut moved: Vec<u16> = Vec::with_capacity(handlers.len());
    for (k, &(sp, ep, hp)) in handlers.iter().enumerate() {
        moved.push(table.n as u16);
        let catch_type = p.method.attr.catch_type(k);
        let handler = layout.new_off[hp as usize];
        let (start, end_pc) = (layout.new_off[sp as usize], layout.new_off[ep as usize]);
        match layout.self_cover.iter().position(|&h| h == hp) {
            Some(j) if (sp..ep).contains(&hp) => {
                // The injected first block goes to its stub; the rest as it was.
                let original = layout.ins_off[hp as usize];
                table.entry((handler, original), layout.stub(j), &[0, 0]);
                if start < handler {
                    table.entry((start, handler), handler, catch_type);
                }
                table.entry((original, end_pc), handler, catch_type);
            }
            _ => table.entry((start, end_pc), handler, catch_type),
        }
    }
    moved
}

/// The catch-all covers the whole code; in a constructor only the runs of instructions
/// where `this` is initialized.
fn catch_all_entries(p: &Parts, table: &mut Table) {
    let (new_off, end) = (&p.layout.new_off, p.layout.end);
    if !p.method.input.sig.is_init {
        table.entry((new_off[0], end), end, &[0, 0]);
        return;
    }
    let flags = &p.sites.this_init;
    let n = p.method.code.insns.len();
    let mut i = 0;
    while i < n {
        if flags[i] == initthis::REACHED_INIT {
            let a = i;
            while i < n && flags[i] == initthis::REACHED_INIT {
                i += 1;
            }
            table.entry((new_off[a], new_off[i]), end, &[0, 0]);
        } else {
            i += 1;
        }
    }
}
