//! The rewriter checked against an independent parser (the `cafebabe` crate) on every
//! class of real jars: the output parses; fields, methods and class attributes are the
//! same; in every rewritten method, removing the injected calls gives back the original
//! instruction sequence, the original exception handlers (then the catch-all), line
//! numbers and local variables; the `Rt.count` arguments of a method add up to its number
//! of instructions (the blocks partition the code). And corrupted classes (bytes
//! flipped, truncated) never panic the rewriter.

mod rewrite_common;

use std::path::Path;

use cafebabe::attributes::{AttributeData, CodeData};
use cafebabe::bytecode::Opcode;
use cafebabe::constant_pool::{LiteralConstant, Loadable, MemberRef, NameAndType};
use cafebabe::descriptors::FieldType;
use cafebabe::MethodAccessFlags;
use jpagent::classfile::{rewrite_class, Bba, RewriteOptions, Rewritten};
use rewrite_common::*;

fn variant(op: &Opcode) -> String {
    let d = format!("{op:?}");
    match op {
        Opcode::Goto(_)
        | Opcode::Jsr(_)
        | Opcode::IfAcmpeq(_)
        | Opcode::IfAcmpne(_)
        | Opcode::IfIcmpeq(_)
        | Opcode::IfIcmpne(_)
        | Opcode::IfIcmplt(_)
        | Opcode::IfIcmpge(_)
        | Opcode::IfIcmpgt(_)
        | Opcode::IfIcmple(_)
        | Opcode::Ifeq(_)
        | Opcode::Ifne(_)
        | Opcode::Iflt(_)
        | Opcode::Ifge(_)
        | Opcode::Ifgt(_)
        | Opcode::Ifle(_)
        | Opcode::Ifnonnull(_)
        | Opcode::Ifnull(_) => d.split('(').next().unwrap_or_default().to_string(),
        Opcode::Tableswitch(t) => format!("Tableswitch {} {} {}", t.low, t.high, t.jumps.len()),
        Opcode::Lookupswitch(t) => {
            format!(
                "Lookupswitch {:?}",
                t.match_offsets.iter().map(|(k, _)| *k).collect::<Vec<_>>()
            )
        }
        _ => d,
    }
}

fn int_arg(op: &Opcode) -> Option<i64> {
    Some(match op {
        Opcode::IconstM1 => -1,
        Opcode::Iconst0 => 0,
        Opcode::Iconst1 => 1,
        Opcode::Iconst2 => 2,
        Opcode::Iconst3 => 3,
        Opcode::Iconst4 => 4,
        Opcode::Iconst5 => 5,
        Opcode::Bipush(v) => *v as i64,
        Opcode::Sipush(v) => *v as i64,
        Opcode::Ldc(Loadable::LiteralConstant(LiteralConstant::Integer(v)))
        | Opcode::LdcW(Loadable::LiteralConstant(LiteralConstant::Integer(v))) => *v as i64,
        _ => return None,
    })
}

fn rt_call(op: &Opcode) -> Option<String> {
    match op {
        Opcode::Invokestatic(m) if m.class_name == "jp/rt/Rt" => {
            Some(m.name_and_type.name.to_string())
        }
        _ => None,
    }
}

/// A call site that passes its context, as the original call it replaces: `NAME$jp` with
/// `Ljp/rt/Node;` as its last argument, back to `NAME` without it. None for any other op.
fn unpassed(op: &Opcode) -> Option<String> {
    let m = match op {
        Opcode::Invokestatic(m) | Opcode::Invokespecial(m) | Opcode::Invokevirtual(m) => m,
        _ => return None,
    };
    let name = m.name_and_type.name.strip_suffix("$jp")?;
    let desc = m.name_and_type.descriptor.replace("Ljp/rt/Node;)", ")");
    if desc == m.name_and_type.descriptor {
        return None;
    }
    let back = MemberRef {
        class_name: m.class_name.clone(),
        name_and_type: NameAndType {
            name: name.to_string().into(),
            descriptor: desc.into(),
        },
    };
    Some(variant(&match op {
        Opcode::Invokestatic(_) => Opcode::Invokestatic(back),
        Opcode::Invokespecial(_) => Opcode::Invokespecial(back),
        _ => Opcode::Invokevirtual(back),
    }))
}

fn code<'a, 'b>(attrs: &'b [cafebabe::attributes::AttributeInfo<'a>]) -> Option<&'b CodeData<'a>> {
    attrs.iter().find_map(|a| match &a.data {
        AttributeData::Code(c) => Some(c),
        _ => None,
    })
}

/// Checks one rewritten method against the original; returns the number of original
/// instructions. `second`: Some(the slot of the caller's context) for a second body.
/// `entry`: the helper a method entered the usual way calls (`enter` or `enterOutOfLine`).
fn check_method(
    name: &str,
    orig: &CodeData,
    new: &CodeData,
    second: Option<u16>,
    entry: &str,
) -> usize {
    let ob = orig.bytecode.as_ref().expect("original bytecode");
    let nb = new.bytecode.as_ref().expect("rewritten bytecode parses");
    let ops: Vec<&Opcode> = nb.opcodes.iter().map(|(_, o)| o).collect();
    // A pending count (bba=precise): a second local after the context, blocks `iinc` it.
    let pending = ops.iter().any(|o| {
        matches!(
            rt_call(o).as_deref(),
            Some("exitPending") | Some("exitFromPending") | Some("thrownFromPending")
        )
    });
    let added = if pending { 2 } else { 1 };
    assert_eq!(new.max_locals, orig.max_locals + added, "{name}");
    let stack = if second.is_some() { 3 } else { added + 1 };
    assert_eq!(new.max_stack, orig.max_stack + stack, "{name}");
    let l = orig.max_locals;
    let acc = l + 1;
    let mut injected = vec![false; ops.len()];
    // Call sites that pass the context, as the original calls.
    let mut renamed: Vec<Option<String>> = vec![None; ops.len()];
    let mut count_sum = 0i64;
    let mut enters = 0;
    for i in 0..ops.len() {
        if let Opcode::Iinc(x, n) = ops[i] {
            if pending && *x == acc {
                assert!(*n > 0, "{name}: a block adds its bytecodes");
                count_sum += *n as i64;
                injected[i] = true;
                continue;
            }
        }
        if let Some(v) = unpassed(ops[i]) {
            assert!(
                matches!(ops[i - 1], Opcode::Aload(x) if *x == l),
                "{name}: a passing call site loads the context last"
            );
            injected[i - 1] = true;
            renamed[i] = Some(v);
            continue;
        }
        let Some(call) = rt_call(ops[i]) else {
            continue;
        };
        injected[i] = true;
        let aload_l = |j: usize| matches!(ops[j], Opcode::Aload(x) if *x == l);
        let iload_acc = |j: usize| matches!(ops[j], Opcode::Iload(x) if *x == acc);
        let istore_acc = |j: usize| matches!(ops[j], Opcode::Istore(x) if *x == acc);
        match call.as_str() {
            "enter" | "enterOutOfLine" | "enterFrom" => {
                let at = usize::from(second.is_some());
                let expected = if second.is_some() { "enterFrom" } else { entry };
                assert_eq!(call, expected, "{name}");
                if let Some(caller) = second {
                    assert!(
                        matches!(ops[0], Opcode::Aload(x) if *x == caller),
                        "{name}: the caller's context, the last argument"
                    );
                    injected[0] = true;
                }
                let i = i - at;
                let ops = &ops[at..];
                assert_eq!(i, 2, "{name}: enter first");
                assert!(int_arg(ops[0]).is_some() && int_arg(ops[1]).is_some());
                assert!(
                    matches!(ops[3], Opcode::Astore(x) if *x == l),
                    "{name}: astore L"
                );
                for j in [0, 1, 3] {
                    injected[at + j] = true;
                }
                if pending {
                    assert!(matches!(ops[4], Opcode::Iconst0), "{name}: pending zeroed");
                    assert!(istore_acc(at + 5), "{name}: pending stored");
                    injected[at + 4] = true;
                    injected[at + 5] = true;
                }
                enters += 1;
            }
            "tickPending" => {
                assert!(aload_l(i - 3), "{name}: {call} loads the context");
                assert!(iload_acc(i - 2), "{name}: {call} loads the pending count");
                assert!(int_arg(ops[i - 1]).is_some(), "{name}: {call} ticks");
                assert!(istore_acc(i + 1), "{name}: {call} stores the pending count");
                for j in [i - 3, i - 2, i - 1, i + 1] {
                    injected[j] = true;
                }
            }
            "flush" | "exitPending" | "exitFromPending" | "thrownFromPending" => {
                assert!(aload_l(i - 2), "{name}: {call} loads the context");
                assert!(iload_acc(i - 1), "{name}: {call} loads the pending count");
                injected[i - 1] = true;
                injected[i - 2] = true;
                if call == "flush" {
                    assert!(istore_acc(i + 1), "{name}: flush stores the pending count");
                    // Then the call, after the context it passes or Rt.at.
                    let mut k = i + 2;
                    while aload_l(k) || rt_call(ops[k]).as_deref() == Some("at") {
                        k += 1;
                    }
                    assert!(
                        matches!(
                            ops[k],
                            Opcode::Invokevirtual(_)
                                | Opcode::Invokespecial(_)
                                | Opcode::Invokestatic(_)
                                | Opcode::Invokeinterface(..)
                                | Opcode::Invokedynamic(_)
                        ),
                        "{name}: flush right before a call"
                    );
                    injected[i + 1] = true;
                }
            }
            "count" | "tick" => {
                assert!(aload_l(i - 2), "{name}: {call} loads the context");
                let n = int_arg(ops[i - 1]).expect("int argument");
                if call == "count" {
                    assert!(n > 0);
                    count_sum += n;
                }
                injected[i - 1] = true;
                injected[i - 2] = true;
            }
            "exit" | "exitFrom" | "thrownFrom" | "caught" | "at" => {
                assert!(aload_l(i - 1), "{name}: {call} loads the context");
                injected[i - 1] = true;
            }
            other => panic!("{name}: unexpected Rt.{other}"),
        }
    }
    assert_eq!(enters, 1, "{name}");
    // Last, one stub per handler that covers itself: a goto_w, itself a handler, back
    // into that handler's original code.
    let handlers: Vec<u16> = new.exception_table.iter().map(|e| e.handler_pc).collect();
    let mut end = ops.len();
    let mut stubs = Vec::new();
    while end > 0
        && matches!(ops[end - 1], Opcode::Goto(_))
        && handlers.contains(&(nb.opcodes[end - 1].0 as u16))
    {
        end -= 1;
        injected[end] = true;
        stubs.push(nb.opcodes[end].0 as u16);
    }
    // The catch-all: aload L; [iload ACC;] Rt.exit[Pending]; athrow before the stubs (L is
    // the context, a local the original does not have).
    let handler_at = end.checked_sub(2 + added as usize);
    let catch_all = handler_at.is_some_and(|k| {
        matches!(ops[k], Opcode::Aload(x) if *x == l)
            && new.exception_table.last().map(|h| h.handler_pc as usize) == Some(nb.opcodes[k].0)
    });
    if catch_all {
        assert!(matches!(ops[end - 1], Opcode::Athrow), "{name}");
        injected[end - 1] = true;
        let h = new.exception_table.last().unwrap();
        assert!(h.catch_type.is_none(), "{name}: catch-all is last");
    }
    let kept: Vec<String> = ops
        .iter()
        .zip(&injected)
        .enumerate()
        .filter(|(_, (_, &j))| !j)
        .map(|(k, (o, _))| renamed[k].clone().unwrap_or_else(|| variant(o)))
        .collect();
    let want: Vec<String> = ob.opcodes.iter().map(|(_, o)| variant(o)).collect();
    assert_eq!(kept, want, "{name}: original instructions");
    assert_eq!(
        count_sum as usize,
        want.len(),
        "{name}: counts add up to the instructions"
    );
    // Handlers in order: a run of entries to one handler is one clause (a self-covering
    // handler's entry is split around its injected first block, which goes to a stub).
    let clauses = |t: &[cafebabe::attributes::ExceptionTableEntry]| -> Vec<String> {
        let mut v: Vec<(u16, String)> = Vec::new();
        for e in t.iter().filter(|e| !stubs.contains(&e.handler_pc)) {
            if v.last().map(|x| x.0) != Some(e.handler_pc) {
                v.push((e.handler_pc, format!("{:?}", e.catch_type)));
            }
        }
        v.into_iter().map(|x| x.1).collect()
    };
    let (o, n) = (
        clauses(&orig.exception_table),
        clauses(&new.exception_table),
    );
    assert_eq!(o[..], n[..o.len()], "{name}: handler order");
    // Line numbers and local variables: same entries, in order.
    let lines = |c: &CodeData| -> Vec<u16> {
        c.attributes
            .iter()
            .flat_map(|a| match &a.data {
                AttributeData::LineNumberTable(t) => t.iter().map(|e| e.line_number).collect(),
                _ => Vec::new(),
            })
            .collect()
    };
    assert_eq!(lines(orig), lines(new), "{name}: line numbers");
    let locals = |c: &CodeData| -> Vec<String> {
        c.attributes
            .iter()
            .flat_map(|a| match &a.data {
                AttributeData::LocalVariableTable(t) => t
                    .iter()
                    .map(|e| format!("{} {}", e.name, e.index))
                    .collect(),
                _ => Vec::new(),
            })
            .collect()
    };
    assert_eq!(locals(orig), locals(new), "{name}: local variables");
    want.len()
}

#[test]
fn rewritten_classes_match_the_originals() {
    let dir = scratch("oracle");
    let mut classes = 0;
    let mut methods = 0;
    let mut instructions = 0;
    let mut seconds = 0;
    for jar in ["js", "h2"] {
        let src = dir.join(jar);
        extract_jar(
            &Path::new("/usr/share/java").join(format!("{jar}.jar")),
            &src,
        );
        let mut files = Vec::new();
        class_files(&src, &mut files);
        for f in files {
            let input = std::fs::read(&f).unwrap();
            let orig = cafebabe::parse_class(&input).expect("original parses");
            // Each way of entering twice, not four times: the entry is one call's name.
            for (bba, pass_context, out_of_line_entry) in [
                (Bba::Default, false, false),
                (Bba::Precise, false, true),
                (Bba::Default, true, true),
                (Bba::Precise, true, false),
            ] {
                let opts = RewriteOptions {
                    bba,
                    pass_context,
                    out_of_line_entry,
                };
                let entry = if out_of_line_entry {
                    "enterOutOfLine"
                } else {
                    "enter"
                };
                let out = match rewrite_class(&input, &opts, &mut Ids(0)).unwrap() {
                    Rewritten::Changed { bytes, .. } => bytes,
                    Rewritten::Unchanged { .. } => continue,
                };
                let new = cafebabe::parse_class(&out)
                    .unwrap_or_else(|e| panic!("{}: output does not parse: {e}", f.display()));
                assert_eq!(
                    format!("{:?}", orig.this_class),
                    format!("{:?}", new.this_class)
                );
                assert_eq!(format!("{:?}", orig.fields), format!("{:?}", new.fields));
                assert_eq!(
                    format!("{:?}", orig.attributes),
                    format!("{:?}", new.attributes)
                );
                // The originals in their places, then the second bodies.
                assert!(new.methods.len() >= orig.methods.len());
                assert!(pass_context || new.methods.len() == orig.methods.len());
                classes += 1;
                for nm in &new.methods[orig.methods.len()..] {
                    seconds += 1;
                    let name = nm.name.strip_suffix("$jp").expect("a second body's name");
                    let desc = format!("{}", nm.descriptor);
                    let om = orig
                        .methods
                        .iter()
                        .find(|m| {
                            m.name == name
                                && format!("{}", m.descriptor) == desc.replace("Ljp/rt/Node;)", ")")
                        })
                        .unwrap_or_else(|| {
                            panic!("{}: {} is no method's second body", f.display(), nm.name)
                        });
                    let keep = MethodAccessFlags::STATIC
                        | MethodAccessFlags::SYNCHRONIZED
                        | MethodAccessFlags::STRICT;
                    assert_eq!(
                        nm.access_flags,
                        (om.access_flags & keep)
                            | MethodAccessFlags::PRIVATE
                            | MethodAccessFlags::SYNTHETIC,
                        "{}: {} access",
                        f.display(),
                        nm.name
                    );
                    assert!(
                        om.access_flags
                            .intersects(MethodAccessFlags::STATIC | MethodAccessFlags::PRIVATE),
                        "{}: only static and private methods",
                        nm.name
                    );
                    let params = om
                        .descriptor
                        .parameters
                        .iter()
                        .map(|p| match p.field_type {
                            FieldType::Long | FieldType::Double if p.dimensions == 0 => 2,
                            _ => 1,
                        })
                        .sum::<u16>();
                    let caller =
                        params + u16::from(!om.access_flags.contains(MethodAccessFlags::STATIC));
                    let (Some(oc), Some(nc)) = (code(&om.attributes), code(&nm.attributes)) else {
                        panic!("{}: a second body without code", nm.name);
                    };
                    let label = format!(
                        "{} {}.{} (second body)",
                        f.display(),
                        orig.this_class,
                        nm.name
                    );
                    instructions += check_method(&label, oc, nc, Some(caller), entry);
                    methods += 1;
                }
                for (om, nm) in orig.methods.iter().zip(&new.methods) {
                    assert_eq!(
                        (&om.name, format!("{:?}", om.descriptor)),
                        (&nm.name, format!("{:?}", nm.descriptor))
                    );
                    assert_eq!(om.access_flags, nm.access_flags);
                    let other = |m: &cafebabe::MethodInfo| -> String {
                        format!(
                            "{:?}",
                            m.attributes
                                .iter()
                                .filter(|a| a.name != "Code")
                                .collect::<Vec<_>>()
                        )
                    };
                    assert_eq!(other(om), other(nm), "{}: non-code attributes", om.name);
                    match (code(&om.attributes), code(&nm.attributes)) {
                        (Some(oc), Some(nc)) => {
                            let label = format!("{} {}.{}", f.display(), orig.this_class, om.name);
                            instructions += check_method(&label, oc, nc, None, entry);
                            methods += 1;
                        }
                        (None, None) => {}
                        _ => panic!("{}: Code attribute appeared or vanished", om.name),
                    }
                }
            }
        }
    }
    println!("{classes} rewritten classes, {methods} methods ({seconds} second bodies), {instructions} instructions checked against cafebabe");
    assert!(methods > 10_000);
    assert!(seconds > 1_000, "second bodies checked: {seconds}");
}

/// Some(parses) or None if the oracle panicked.
fn oracle_parses(bytes: &[u8]) -> Option<bool> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cafebabe::parse_class(bytes).is_ok()
    }))
    .ok()
}

#[test]
fn corrupted_real_classes_never_panic() {
    // cafebabe's own panics on damaged input are expected: keep them out of the log.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !info
            .location()
            .is_some_and(|l| l.file().contains("cafebabe"))
        {
            default_hook(info);
        }
    }));
    let dir = scratch("corrupt");
    let src = dir.join("js");
    extract_jar(Path::new("/usr/share/java/js.jar"), &src);
    let mut files = Vec::new();
    class_files(&src, &mut files);
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let (mut changed, mut unchanged, mut errors) = (0, 0, 0);
    for f in files.iter().step_by(4) {
        let input = std::fs::read(f).unwrap();
        for k in 0..40 {
            let mut v = input.clone();
            if k % 8 == 0 {
                v.truncate((next() % v.len() as u64) as usize);
            } else if k % 8 == 1 {
                // A small number where an offset, index or count may be.
                let i = (next() % (v.len() as u64 - 1)) as usize;
                v[i..i + 2].copy_from_slice(&((next() % 300) as u16).to_be_bytes());
            } else {
                for _ in 0..(1 + next() % 3) {
                    let i = (next() % v.len() as u64) as usize;
                    v[i] ^= 1 << (next() % 8);
                }
            }
            let bba = if k % 2 == 0 {
                Bba::Default
            } else {
                Bba::Precise
            };
            match rewrite_class(
                &v,
                &RewriteOptions {
                    bba,
                    pass_context: false,
                    out_of_line_entry: false,
                },
                &mut Ids(0),
            ) {
                Ok(Rewritten::Changed { bytes, .. }) => {
                    changed += 1;
                    // When the damaged input still parses for cafebabe, so must our output
                    // (cafebabe itself panics on some damaged inputs: those are skipped).
                    if oracle_parses(&v) == Some(true) {
                        assert_eq!(
                            oracle_parses(&bytes),
                            Some(true),
                            "{}: output of a parseable input",
                            f.display()
                        );
                    }
                }
                Ok(Rewritten::Unchanged { .. }) => unchanged += 1,
                Err(_) => errors += 1,
            }
        }
    }
    println!("corrupted inputs: {changed} rewritten, {unchanged} unchanged, {errors} rejected with an error");
    assert!(changed > 0 && errors > 0);
}

const ANN: &str = r#"
import java.lang.annotation.*;

@Target(ElementType.TYPE_USE)
@Retention(RetentionPolicy.RUNTIME)
@interface TA {
    int value() default 0;
}

public class Ann {
    static Object m(Object o, int n) {
        @TA(1) String s = (@TA(2) String) o;
        Object x = new @TA(3) StringBuilder(s);
        for (int i = 0; i < n; i++) {
            @TA(4) Object y = x;
            if (y instanceof @TA(5) CharSequence) {
                x = new @TA(6) StringBuilder((CharSequence) y);
            }
        }
        try {
            return java.util.List.<@TA(7) Object>of(x);
        } catch (@TA(8) RuntimeException e) {
            return s;
        }
    }
}
"#;

/// (annotation value, what it points at): the opcode at an offset target, the opcode
/// starting a local variable's range (its first instruction), or a catch index.
fn type_annotation_targets(bytes: &[u8]) -> Vec<(String, String)> {
    use cafebabe::attributes::TypeAnnotationTarget as T;
    let class = cafebabe::parse_class(bytes).expect("parses");
    let m = class.methods.iter().find(|m| m.name == "m").expect("m");
    let c = code(&m.attributes).expect("code");
    let bc = c.bytecode.as_ref().expect("bytecode");
    // The first original instruction at or after an offset: skip injected code.
    let first_original_from = |off: u16| -> String {
        let mut i = bc.opcodes.partition_point(|(o, _)| *o < off as usize);
        while i < bc.opcodes.len() {
            let op = &bc.opcodes[i].1;
            let injected = rt_call(op).is_some()
                || bc
                    .opcodes
                    .get(i + 1)
                    .is_some_and(|(_, n)| rt_call(n).is_some())
                || bc.opcodes.get(i + 2).is_some_and(|(_, n)| {
                    rt_call(n).is_some_and(|c| c == "count" || c == "tick" || c == "enter")
                });
            if !injected {
                return variant(op);
            }
            i += 1;
        }
        "end".into()
    };
    let at = |off: u16| -> String {
        let i = bc.opcodes.partition_point(|(o, _)| *o < off as usize);
        match bc.opcodes.get(i) {
            Some((o, op)) if *o == off as usize => variant(op),
            _ => "not an instruction".into(),
        }
    };
    let mut v = Vec::new();
    for a in &c.attributes {
        if let AttributeData::RuntimeVisibleTypeAnnotations(list) = &a.data {
            for t in list {
                let value = format!("{:?}", t.annotation.elements);
                let what = match &t.target_type {
                    T::Offset { offset } => at(*offset),
                    T::TypeArgument { offset, .. } => at(*offset),
                    T::LocalVar(entries) => entries
                        .iter()
                        .map(|e| format!("{} {}", first_original_from(e.start_pc), e.index))
                        .collect::<Vec<_>>()
                        .join(","),
                    T::Catch {
                        exception_table_index,
                    } => format!("catch {exception_table_index}"),
                    other => format!("{other:?}"),
                };
                v.push((value, what));
            }
        }
    }
    v
}

#[test]
fn type_annotations_follow_their_instructions() {
    let dir = scratch("typeann");
    let src = dir.join("Ann.java");
    std::fs::write(&src, ANN).unwrap();
    let out = dir.join("out");
    javac(&[src], &out, None, "17");
    let input = std::fs::read(out.join("Ann.class")).unwrap();
    let want = type_annotation_targets(&input);
    assert_eq!(
        want.len(),
        8,
        "javac wrote a type annotation per use: {want:?}"
    );
    for bba in [Bba::Default, Bba::Precise] {
        let Rewritten::Changed { bytes, stats } = rewrite_class(
            &input,
            &RewriteOptions {
                bba,
                pass_context: false,
                out_of_line_entry: false,
            },
            &mut Ids(0),
        )
        .unwrap() else {
            panic!("unchanged")
        };
        assert_eq!(
            (
                stats.type_annotations_remapped,
                stats.type_annotations_dropped
            ),
            (1, 0)
        );
        assert_eq!(type_annotation_targets(&bytes), want, "{bba:?}");
    }
}
