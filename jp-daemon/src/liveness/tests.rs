use super::*;

const S: Duration = Duration::from_secs(1);

#[test]
fn a_part_is_stuck_only_past_twice_its_interval_plus_the_grace() {
    let part = Part("test_judge");
    // Interval 1 s, grace 3 s (WatchdogSec=6s): 5 s allowed.
    assert_eq!(allowed_idle(S, S * 3), S * 5);
    let within = judge(part, S, S * 3, S * 5, None);
    assert_eq!(
        within,
        Health {
            part,
            idle: S * 5,
            stuck: false,
            detail: String::new()
        }
    );
    let past = judge(part, S, S * 3, Duration::from_millis(5001), None);
    assert!(past.stuck);
    assert_eq!(past.detail, "no progress for 5.0 s (allowed 5.0 s)");
    // A slower part (the USDT scan every 10 s) is allowed its own interval twice.
    assert!(!judge(part, S * 10, S * 3, S * 20, None).stuck);
    assert!(judge(part, S * 10, S * 3, S * 24, None).stuck);
}

#[test]
fn an_ended_part_is_stuck_at_once_with_its_reason() {
    let h = judge(
        Part("test_ended"),
        S,
        S * 15,
        Duration::ZERO,
        Some("the ring buffer poll failed".into()),
    );
    assert!(h.stuck);
    assert_eq!(h.detail, "ended: the ring buffer poll failed");
}

fn mine(name: &str) -> Health {
    check()
        .into_iter()
        .find(|h| h.part.0 == name)
        .unwrap_or_else(|| panic!("{name} is not registered"))
}

#[test]
fn the_registry_sees_beats_ends_and_drops() {
    let beating = Heartbeat::register(Part("test_beating"), S);
    beating.beat();
    let health = mine("test_beating");
    assert!(!health.stuck, "{health:?}");
    assert!(health.idle < S, "{health:?}");

    let ended = Heartbeat::register(Part("test_ended_by_name"), S);
    ended.end("the task returned");
    assert_eq!(
        mine("test_ended_by_name").detail,
        "ended: the task returned"
    );

    let dropped = Heartbeat::register(Part("test_dropped"), S);
    assert_eq!(dropped.part(), Part("test_dropped"));
    drop(dropped);
    assert_eq!(mine("test_dropped").detail, "ended: it ended");

    // A new life registers afresh under the same name.
    let again = Heartbeat::register(Part("test_dropped"), S);
    assert!(!mine("test_dropped").stuck);
    drop(again);
    drop(beating);
}

#[test]
fn a_part_that_stops_beating_is_held_stuck_by_check() {
    let quiet = Heartbeat::register(Part("test_quiet"), S);
    let later = |secs| {
        check_at(Instant::now() + S * secs, S * 3)
            .into_iter()
            .find(|h| h.part == Part("test_quiet"))
            .unwrap_or_else(|| panic!("test_quiet is not registered"))
    };
    // 1 s interval, 3 s grace: held alive for 5 s, stuck after.
    assert!(!later(4).stuck);
    let h = later(6);
    assert!(h.stuck && h.idle >= S * 6, "{h:?}");
    assert!(h.detail.starts_with("no progress for 6."), "{h:?}");
    drop(quiet);
}
