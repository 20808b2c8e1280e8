//! The window store's bounds: per JVM, per host in bytes, and what a pusher reads since.
use std::time::{Duration, UNIX_EPOCH};

use super::*;

pub(crate) fn window(pid: u32, start_time: u64, id: u64, contexts: usize) -> WindowProfile {
    let mut tree = Mct::new("default");
    for i in 0..contexts {
        tree.add(
            0,
            jp_mct::MethodInfo {
                name: Arc::from(format!("M.m{i}()V")),
                file: None,
            },
            1,
            2,
        );
    }
    WindowProfile {
        id,
        pid,
        start_time,
        main_class: "Main".into(),
        scope: "all application classes".into(),
        seconds: 5,
        origin: WindowOrigin::Request,
        jdk_version: "17.0.15".into(),
        opened: UNIX_EPOCH + Duration::from_secs(100),
        closed: UNIX_EPOCH + Duration::from_secs(105),
        tree,
        meta: BTreeMap::new(),
    }
}

fn ids(v: &[Arc<WindowProfile>]) -> Vec<u64> {
    v.iter().map(|w| w.id).collect()
}

#[test]
fn each_jvm_keeps_its_newest_windows() {
    let mut s = WindowStore::new(2, MAX_STORE_BYTES);
    for id in 1..=3 {
        s.insert(Arc::new(window(10, 7, id, 1))).unwrap();
    }
    s.insert(Arc::new(window(20, 7, 9, 1))).unwrap();
    // The same pid, another process: its own JVM.
    s.insert(Arc::new(window(10, 8, 4, 1))).unwrap();
    assert_eq!(ids(&s.list(None)), [2, 3, 4, 9]);
    assert_eq!(ids(&s.list(Some(10))), [2, 3, 4]);
    assert_eq!(s.get(10, 3).map(|w| w.id), Some(3));
    assert!(s.get(10, 1).is_none(), "dropped beyond keep");
    assert!(s.get(20, 3).is_none(), "another JVM's id");
    s.set_keep(1);
    assert_eq!(ids(&s.list(None)), [3, 4, 9]);
}

#[test]
fn the_host_keeps_its_bytes_dropping_the_oldest_first() {
    let one = window(1, 1, 1, 10).memory_bytes();
    let mut s = WindowStore::new(8, one * 2);
    s.insert(Arc::new(window(1, 1, 1, 10))).unwrap();
    s.insert(Arc::new(window(2, 1, 2, 10))).unwrap();
    s.insert(Arc::new(window(1, 1, 3, 10))).unwrap();
    assert_eq!(ids(&s.list(None)), [3, 2]);
    assert_eq!(s.memory_bytes(), one * 2);
    let e = s.insert(Arc::new(window(3, 1, 4, 100))).unwrap_err();
    assert!(e.starts_with("the window's tree (100 contexts"), "{e}");
    assert_eq!(ids(&s.list(None)), [3, 2], "a refused window drops nothing");
}

#[test]
fn since_gives_each_stored_window_once_in_order() {
    let mut s = WindowStore::default();
    let (none, seen) = s.since(0);
    assert!(none.is_empty());
    assert_eq!(seen, 0);
    s.insert(Arc::new(window(5, 1, 11, 1))).unwrap();
    s.insert(Arc::new(window(2, 1, 12, 1))).unwrap();
    let (new, seen) = s.since(seen);
    assert_eq!(ids(&new), [11, 12]);
    s.insert(Arc::new(window(5, 1, 13, 1))).unwrap();
    let (new, seen) = s.since(seen);
    assert_eq!(ids(&new), [13]);
    assert_eq!(s.since(seen).0.len(), 0);
}

#[test]
fn a_window_keeps_its_origin_and_jvm_version() {
    let mut s = WindowStore::default();
    for (id, origin) in [
        (1, WindowOrigin::Request),
        (2, WindowOrigin::Rotation),
        (3, WindowOrigin::Http),
    ] {
        let w = WindowProfile {
            origin,
            jdk_version: format!("25.0.{id}+9-LTS"),
            ..window(7, 1, id, 1)
        };
        s.insert(Arc::new(w)).unwrap();
    }
    let kept: Vec<(u64, &str, String)> = s
        .list(Some(7))
        .iter()
        .map(|w| (w.id, w.origin.label(), w.jdk_version.clone()))
        .collect();
    assert_eq!(
        kept,
        [
            (1, "request", "25.0.1+9-LTS".to_string()),
            (2, "rotation", "25.0.2+9-LTS".to_string()),
            (3, "http", "25.0.3+9-LTS".to_string()),
        ]
    );
    assert_eq!(s.get(7, 2).map(|w| w.origin), Some(WindowOrigin::Rotation));
    assert_eq!(
        s.since(0).0.iter().map(|w| w.origin).collect::<Vec<_>>(),
        WindowOrigin::ALL
    );
    // The version is part of what the window costs jpd.
    let long = WindowProfile {
        jdk_version: "v".repeat(1000),
        ..window(7, 1, 4, 1)
    };
    assert_eq!(
        long.memory_bytes(),
        window(7, 1, 4, 1).memory_bytes() + 1000 - 7
    );
}
