//! Second bodies: a static or private method of the class may get a copy `NAME$jp` that
//! takes its caller's context as a last argument, which the class's own call sites call
//! instead (docs/agent-design.md, "Second bodies: passed contexts").

use super::class::{
    is_empty_finalizer, ClassInfo, MethodInfo, ACC_BRIDGE, ACC_PRIVATE, ACC_STATIC,
};
use super::error::RewriteError;

/// Static and private methods (not constructors, not bridges) may be called with their
/// caller's context from the class's own code, where the call's target is exactly known.
pub(crate) fn may_have_second_body(
    bytes: &[u8],
    class: &ClassInfo,
    m: &MethodInfo,
) -> Result<bool, RewriteError> {
    let Some((start, end)) = m.code else {
        return Ok(false);
    };
    let name = class.cp.utf8_bytes(m.name)?;
    let desc = class.cp.utf8_bytes(m.desc)?;
    if m.access & (ACC_STATIC | ACC_PRIVATE) == 0
        || m.access & ACC_BRIDGE != 0
        || name.first() == Some(&b'<')
        || is_empty_finalizer(&class.cp.utf8(m.name)?, desc, &bytes[start + 6..end])
    {
        return Ok(false);
    }
    let Some(slots) = arg_slots(desc) else {
        return Ok(false);
    };
    // The JVM allows 255 argument slots, `this` included; the context takes one more.
    let own = slots + u32::from(m.access & ACC_STATIC == 0);
    if own + 1 > 255 {
        return Ok(false);
    }
    // A method already named like the second body (not ours to shadow).
    let (second_name, second_desc) = second_signature(name, desc);
    for o in &class.methods {
        if class.cp.utf8_bytes(o.name)? == second_name.as_slice()
            && class.cp.utf8_bytes(o.desc)? == second_desc.as_slice()
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// `NAME$jp` and the descriptor with `Ljp/rt/Node;` as the last argument.
pub(crate) fn second_signature(name: &[u8], desc: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut n = name.to_vec();
    n.extend_from_slice(b"$jp");
    let close = desc.iter().rposition(|&c| c == b')').unwrap_or(0);
    let mut d = desc[..close].to_vec();
    d.extend_from_slice(b"Ljp/rt/Node;");
    d.extend_from_slice(&desc[close..]);
    (n, d)
}

/// Local slots the arguments of a method descriptor take (`this` not counted).
pub(crate) fn arg_slots(desc: &[u8]) -> Option<u32> {
    if desc.first() != Some(&b'(') {
        return None;
    }
    let mut i = 1;
    let mut n = 0;
    loop {
        match *desc.get(i)? {
            b')' => return Some(n),
            b'J' | b'D' => {
                n += 2;
                i += 1;
            }
            b'B' | b'C' | b'F' | b'I' | b'S' | b'Z' => {
                n += 1;
                i += 1;
            }
            b'L' | b'[' => {
                while *desc.get(i)? == b'[' {
                    i += 1;
                }
                if desc[i] == b'L' {
                    i += desc[i..].iter().position(|&c| c == b';')?;
                }
                n += 1;
                i += 1;
            }
            _ => return None,
        }
    }
}
