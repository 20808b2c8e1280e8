//! The wire format's tests: round trips through [`Writer`] and the decoders, and
//! hostile bytes.
use super::*;

#[test]
fn layouts_are_fixed() {
    assert_eq!(HEADER_LEN, 40);
    assert_eq!(EVENT_HEADER_LEN, 24);
    assert_eq!(core::mem::size_of::<Control>(), 64);
    assert_eq!(&MAGIC.to_le_bytes(), b"JPW1");
}

#[test]
fn tree_round_trip() {
    let mut buf = [0u8; 256];
    let h = header(KIND_TREE, 7, 3, 1, 0, FLAG_RESYNC | FLAG_ABSOLUTE);
    let mut w = Writer::new(&mut buf, &h).unwrap();
    w.string(b"main").unwrap();
    w.begin_entries().unwrap();
    let a = TreeEntry {
        node: 1,
        definition: Some((0, 42)),
        calls: 1,
        bytecodes: 300,
    };
    let b = TreeEntry {
        node: 1,
        definition: None,
        calls: u64::MAX,
        bytecodes: 0,
    };
    w.tree_entry(&a).unwrap();
    w.tree_entry(&b).unwrap();
    let rec = w.finish();
    let r = split_record(rec).unwrap();
    assert_eq!(r.header.len as usize, rec.len());
    assert_eq!(r.header.pid, 7);
    assert_eq!(r.header.generation, 3);
    let t = Tree::decode(r.body).unwrap();
    assert_eq!(t.thread_name, b"main");
    let got: Vec<_> = t.entries.collect::<Result<_, _>>().unwrap();
    assert_eq!(got, [a, b]);

    let mut entries = vec![a; 3];
    assert_eq!(
        decode_body(&r, &mut entries),
        Ok(Body::Tree(TreeBody {
            thread_name: b"main",
            entries: &[a, b]
        }))
    );
    // One bad entry refuses the whole body.
    let mut bad = rec.to_vec();
    let last = bad.len() - 1;
    bad[last] = 0x80;
    let r = split_record(&bad).unwrap();
    assert_eq!(decode_body(&r, &mut entries), Err(WireError::Varint));
}

#[test]
fn thread_slots_decode_with_or_without_a_heap_context() {
    let body = |vals: &[u64]| {
        let mut buf = [0u8; 128];
        let h = header(KIND_THREAD, 7, 3, 1, 0, 0);
        let mut w = Writer::new(&mut buf, &h).unwrap();
        for v in vals {
            w.varint(*v).unwrap();
        }
        w.finish()[HEADER_LEN..].to_vec()
    };
    assert_eq!(
        ThreadSlot::decode(&body(&[42, 0x7f00_0000_1000])),
        Ok(ThreadSlot {
            os_tid: 42,
            slot: 0x7f00_0000_1000,
            heap: None
        })
    );
    assert_eq!(
        ThreadSlot::decode(&body(&[42, 0x7f00_0000_1000, 12, 16, 0xdead_beef])),
        Ok(ThreadSlot {
            os_tid: 42,
            slot: 0x7f00_0000_1000,
            heap: Some(HeapContext {
                current_offset: 12,
                cookie_offset: 16,
                cookie: 0xdead_beef
            })
        })
    );
    // Half a heap context, offsets beyond an object's first fields, a cookie wider
    // than 32 bits, and bytes after it are refused.
    assert!(ThreadSlot::decode(&body(&[42, 8, 12, 16])).is_err());
    assert!(ThreadSlot::decode(&body(&[42, 8, MAX_HEAP_OFFSET, 16, 1])).is_err());
    assert!(ThreadSlot::decode(&body(&[42, 8, 12, MAX_HEAP_OFFSET, 1])).is_err());
    assert!(ThreadSlot::decode(&body(&[42, 8, 12, 16, 1 << 32])).is_err());
    assert!(ThreadSlot::decode(&body(&[42, 8, 12, 16, 1, 0])).is_err());
}

#[test]
fn jvm_end_has_an_empty_body() {
    let mut buf = [0u8; 128];
    let h = header(KIND_JVM_END, 1, 2, 0, 5, FLAG_END);
    let rec = Writer::new(&mut buf, &h).unwrap().finish();
    let r = split_record(rec).unwrap();
    assert_eq!(decode_body(&r, &mut Vec::new()), Ok(Body::JvmEnd));
    let mut w = Writer::new(&mut buf, &h).unwrap();
    w.string(b"garbage").unwrap();
    let rec = w.finish();
    let r = split_record(rec).unwrap();
    assert_eq!(decode_body(&r, &mut Vec::new()), Err(WireError::Trailing));
}

#[test]
fn methods_and_hello_round_trip() {
    let mut buf = [0u8; 512];
    let mut w = Writer::new(&mut buf, &header(KIND_METHODS, 1, 0, 0, 1, 0)).unwrap();
    w.begin_entries().unwrap();
    let m = MethodDef {
        mid: 5,
        class: b"a.B",
        name: b"f",
        descriptor: b"(I)V",
        source_file: b"a/B.java",
    };
    w.method(&m).unwrap();
    let rec = w.finish();
    let r = split_record(rec).unwrap();
    let got: Vec<_> = MethodIter::new(r.body)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(got, std::slice::from_ref(&m));
    let mut entries = Vec::new();
    assert_eq!(decode_body(&r, &mut entries), Ok(Body::Methods(vec![m])));

    let mut buf = [0u8; 512];
    let h = header(KIND_HELLO, 1, 9, 0, 0, FLAG_RESYNC | FLAG_ABSOLUTE);
    let mut w = Writer::new(&mut buf, &h).unwrap();
    for v in [1_700_000_000_000u64, 10_000_000, 1, 3] {
        w.varint(v).unwrap();
    }
    for s in [&b"17.0.9"[..], b"Main", b"0.1.0"] {
        w.string(s).unwrap();
    }
    let rec = w.finish();
    let hello = Hello::decode(split_record(rec).unwrap().body).unwrap();
    assert_eq!(hello.granularity, 10_000_000);
    assert_eq!(hello.main, b"Main");
    assert_eq!(
        decode_body(&split_record(rec).unwrap(), &mut entries),
        Ok(Body::Hello(hello))
    );
}

#[test]
fn writer_never_overruns_and_drops_partial_entries() {
    let mut buf = [0u8; HEADER_LEN + 4 + 3];
    let mut w = Writer::new(&mut buf, &header(KIND_TREE, 1, 0, 1, 0, 0)).unwrap();
    w.string(b"").unwrap();
    w.begin_entries().unwrap();
    let e = TreeEntry {
        node: 300,
        definition: None,
        calls: 1,
        bytecodes: 1,
    };
    // 2 + 1 + 1 bytes do not fit in the 2 left.
    assert_eq!(w.tree_entry(&e), Err(Full));
    let rec = w.finish();
    let t = Tree::decode(split_record(rec).unwrap().body).unwrap();
    assert_eq!(t.entries.count(), 0);
}

#[test]
fn bad_headers_are_rejected() {
    let mut buf = [0u8; 64];
    let mut w = Writer::new(&mut buf, &header(KIND_TREE, 1, 0, 1, 0, 0)).unwrap();
    w.string(b"").unwrap();
    w.begin_entries().unwrap();
    let good = w.finish().to_vec();
    assert!(split_record(&good).is_ok());
    let mut bad = good.clone();
    bad[0] ^= 1;
    assert_eq!(split_record(&bad).unwrap_err(), WireError::BadMagic);
    assert_eq!(
        split_record(&good[..good.len() - 1]).unwrap_err(),
        WireError::Length
    );
    let mut bad = good.clone();
    bad[24..32].copy_from_slice(&0u64.to_le_bytes()); // tree on the JVM stream
    assert_eq!(split_record(&bad).unwrap_err(), WireError::Stream);
    let mut bad = good.clone();
    bad[36] = FLAG_RESYNC as u8; // resync without absolute
    assert!(matches!(split_record(&bad), Err(WireError::Flags(_))));
    assert_eq!(split_record(&good[..10]).unwrap_err(), WireError::Truncated);
}

#[test]
fn varints_are_bounded() {
    let ten = [0xffu8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
    assert_eq!(Reader::new(&ten).varint(), Ok(u64::MAX));
    let overflow = [0xffu8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
    assert_eq!(Reader::new(&overflow).varint(), Err(WireError::Varint));
    let long = [0x80u8; 11];
    assert_eq!(Reader::new(&long).varint(), Err(WireError::Varint));
    assert_eq!(Reader::new(&[0x80]).varint(), Err(WireError::Varint));
}

#[test]
fn hostile_bytes_never_panic() {
    // A small deterministic fuzz: every body decoder over pseudo-random bytes behind a
    // valid header.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for round in 0..20_000u32 {
        let mut rec = [0u8; 96];
        let kind = [KIND_HELLO, KIND_METHODS, KIND_TREE, KIND_JVM_END][(round % 4) as usize];
        let flags = match kind {
            KIND_HELLO => FLAG_RESYNC | FLAG_ABSOLUTE,
            KIND_JVM_END => FLAG_END,
            _ => 0,
        };
        let stream = u64::from(kind == KIND_TREE);
        Writer::new(&mut rec, &header(kind, 1, 0, stream, 0, flags)).unwrap();
        let len = HEADER_LEN + (round as usize % 56);
        for b in rec[HEADER_LEN..len].iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        rec[8..12].copy_from_slice(&(len as u32).to_le_bytes());
        let Ok(r) = split_record(&rec[..len]) else {
            continue;
        };
        match kind {
            KIND_HELLO => {
                let _ = Hello::decode(r.body);
            }
            KIND_METHODS => {
                if let Ok(it) = MethodIter::new(r.body) {
                    it.for_each(|m| {
                        let _ = m;
                    });
                }
            }
            KIND_TREE => {
                if let Ok(t) = Tree::decode(r.body) {
                    t.entries.for_each(|e| {
                        let _ = e;
                    });
                }
            }
            _ => {}
        }
    }
}

#[test]
fn unmounted_time_round_trips_and_refuses_what_no_agent_sends() {
    let a = Unmounted {
        node: 3,
        why: unmounted::SLEEP as u8,
        ns: 20_000_000,
        periods: 2,
    };
    let b = Unmounted {
        node: 0,
        why: unmounted::YIELD as u8,
        ns: u64::MAX,
        periods: 1,
    };
    let record = |entries: &[Unmounted], stream: u64, flags: u32| {
        let mut buf = [0u8; 256];
        let h = header(KIND_UNMOUNTED, 7, 3, stream, 0, flags);
        let mut w = Writer::new(&mut buf, &h).unwrap();
        w.begin_entries().unwrap();
        for u in entries {
            w.unmounted(u).unwrap();
        }
        w.finish().to_vec()
    };
    let rec = record(&[a, b], 9, 0);
    let r = split_record(&rec).unwrap();
    let mut scratch = Vec::new();
    assert_eq!(
        decode_body(&r, &mut scratch),
        Ok(Body::Unmounted(vec![a, b]))
    );
    // Not on the JVM's stream, nor the ended threads', nor with flags.
    for (stream, flags, e) in [
        (0, 0, WireError::Stream),
        (STREAM_ENDED, 0, WireError::Stream),
        (9, FLAG_END, WireError::Flags(FLAG_END)),
    ] {
        assert_eq!(split_record(&record(&[a], stream, flags)).err(), Some(e));
    }
    // A reason out of range, no periods, a node beyond the ids: the whole record is refused.
    for bad in [
        Unmounted { why: 0, ..a },
        Unmounted {
            why: unmounted::END as u8,
            ..a
        },
        Unmounted { periods: 0, ..a },
    ] {
        let rec = record(&[a, bad], 9, 0);
        let r = split_record(&rec).unwrap();
        assert_eq!(decode_body(&r, &mut scratch), Err(WireError::Id));
    }
    let mut far = record(&[a], 9, 0);
    far[HEADER_LEN + 4] = 0xff; // node varint runs on past MAX_NODE_ID
    far[HEADER_LEN + 5] = 0xff;
    let r = split_record(&far).unwrap();
    assert!(decode_body(&r, &mut scratch).is_err());
    // A count beyond the entries that follow, or above the cap.
    let mut short = record(&[a], 9, 0);
    short[HEADER_LEN] = 2;
    let r = split_record(&short).unwrap();
    assert_eq!(decode_body(&r, &mut scratch), Err(WireError::Varint));
    let mut many = record(&[], 9, 0);
    many[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&(MAX_UNMOUNTED_ENTRIES + 1).to_le_bytes());
    let r = split_record(&many).unwrap();
    assert_eq!(decode_body(&r, &mut scratch), Err(WireError::Id));
    // Bytes after the last entry.
    let mut trailing = record(&[a], 9, 0);
    trailing.push(0);
    let len = trailing.len() as u32;
    trailing[8..12].copy_from_slice(&len.to_le_bytes());
    let r = split_record(&trailing).unwrap();
    assert_eq!(decode_body(&r, &mut scratch), Err(WireError::Trailing));
}
