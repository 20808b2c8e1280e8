use super::*;
use crate::windows::rotation::config::{Percent, RotationConfig};

fn policy(budget_percent: f64, seconds: f64, max_open: u32) -> Policy {
    Policy {
        budget: budget_percent / 100.0,
        seconds,
        max_open,
    }
}

fn jvm(agent: AgentState) -> Candidate {
    Candidate {
        pid: 100,
        start_time: 7,
        uid: 1000,
        main_class: "com.acme.Shop".into(),
        cgroup: "/system.slice/shop.service".into(),
        agent,
        attach_disabled: false,
    }
}

/// Equal to the last bit but a few: the arithmetic is exact up to rounding.
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn duty_times_cost_is_the_budget() {
    // 1 % budget, 10 s windows: the prior (4.0 extra) gives a duty of 0.25 %, a mean
    // gap of 10 × (1 − 0.0025) / 0.0025 = 3990 s, and 0.0025 × 4.0 = 1 % extra CPU.
    let p = policy(1.0, 10.0, 1);
    let plan = plan(&p, &[PRIOR_COST, 0.5, 2.0]);
    assert_eq!(plan.scale, 1.0);
    let duties: Vec<f64> = plan.shares.iter().map(|s| s.duty).collect();
    assert!(close(duties[0], 0.0025), "{duties:?}");
    assert!(close(duties[1], 0.02), "{duties:?}");
    assert!(close(duties[2], 0.005), "{duties:?}");
    for (share, cost) in plan.shares.iter().zip([PRIOR_COST, 0.5, 2.0]) {
        assert!(close(share.duty * cost, 0.01));
        // T / (T + G) is the duty back.
        assert!(close(10.0 / (10.0 + share.mean_gap), share.duty));
    }
    assert!(close(plan.shares[0].mean_gap, 3990.0));
    assert!(close(plan.expected_open, 0.0275));
}

#[test]
fn cheap_windows_are_bounded_by_the_noise_floor_and_max_duty() {
    // A cost of 0 counts as MIN_COST (0.1): duty 1 % / 0.1 = 10 %.
    let p = policy(1.0, 10.0, 4);
    let plan = plan(&p, &[0.0, 0.05]);
    assert!(close(plan.shares[0].duty, 0.1));
    assert!(close(plan.shares[1].duty, 0.1));
    // A generous budget still leaves every JVM at most half its time in windows.
    let plan = super::plan(&policy(50.0, 10.0, 4), &[0.2]);
    assert_eq!(plan.shares[0].duty, MAX_DUTY);
    assert!(close(plan.shares[0].mean_gap, 10.0));
}

#[test]
fn max_open_scales_every_duty_alike() {
    // 100 JVMs at 10 % duty want 10 windows open at once; one slot filled to 80 % leaves
    // each 0.8 %: scale 0.08, and each pays 0.008 × 0.1 = 0.08 % (under its 1 %).
    let p = policy(1.0, 10.0, 1);
    let costs = vec![0.1; 100];
    let plan = plan(&p, &costs);
    assert!(close(plan.scale, 0.08));
    assert!(close(plan.expected_open, 0.8));
    for s in &plan.shares {
        assert!(close(s.duty, 0.008));
        assert!(s.duty * 0.1 <= p.budget);
    }
    // Two slots: twice as much.
    let plan = super::plan(&policy(1.0, 10.0, 2), &costs);
    assert!(close(plan.expected_open, 1.6));
}

#[test]
fn expected_windows_over_a_horizon() {
    let p = policy(1.0, 10.0, 1);
    let plan = plan(&p, &[1.0]);
    // duty 1 %, one window per 1000 s: 3.6 per hour.
    assert!(close(expected_windows(&p, &plan.shares[0], 3600.0), 3.6));
}

#[test]
fn gaps_are_exponential_with_the_mean_asked() {
    assert_eq!(next_open(5.0, 100.0, 1.0), 5.0);
    assert!(close(next_open(5.0, 100.0, (-1.0f64).exp()), 105.0));
    assert!(next_open(0.0, 100.0, 0.0).is_finite());
    // The mean of -ln U over a fine grid of U is 1.
    let n = 1_000_000;
    let mean: f64 = (1..=n)
        .map(|i| next_open(0.0, 1.0, (i as f64 - 0.5) / n as f64))
        .sum::<f64>()
        / n as f64;
    assert!((mean - 1.0).abs() < 1e-3, "{mean}");
    assert_eq!(mean_gap(10.0, 0.0), f64::INFINITY);
}

#[test]
fn due_windows_take_free_slots_earliest_first() {
    let due = [Some(3.0), None, Some(1.0), Some(9.0), Some(2.0)];
    assert_eq!(due_now(&due, 5.0, 0, 2), vec![2, 4]);
    assert_eq!(due_now(&due, 5.0, 1, 2), vec![2]);
    assert_eq!(due_now(&due, 5.0, 2, 2), Vec::<usize>::new());
    assert_eq!(due_now(&due, 5.0, 3, 2), Vec::<usize>::new());
    assert_eq!(due_now(&due, 10.0, 0, 8), vec![2, 4, 0, 3]);
    assert_eq!(due_now(&due, 0.5, 0, 8), Vec::<usize>::new());
}

#[test]
fn dormant_jvms_opted_in_others_only_when_named() {
    let all = RotationConfig::default();
    assert_eq!(
        eligibility(&all, &jvm(AgentState::Dormant)),
        Eligibility::Dormant
    );
    assert_eq!(
        eligibility(&all, &jvm(AgentState::WindowOpen)),
        Eligibility::Dormant
    );
    assert!(matches!(
        eligibility(&all, &jvm(AgentState::Live)),
        Eligibility::No(_)
    ));
    assert!(matches!(
        eligibility(&all, &jvm(AgentState::Unknown)),
        Eligibility::No(_)
    ));
    // Without the agent: never by default, not with attach_without_agent alone, only
    // when a filter names the JVM too.
    let none = jvm(AgentState::None);
    assert!(matches!(eligibility(&all, &none), Eligibility::No(_)));
    let attach = RotationConfig {
        attach_without_agent: true,
        ..RotationConfig::default()
    };
    assert!(matches!(eligibility(&attach, &none), Eligibility::No(_)));
    let named = RotationConfig {
        uids: vec![1000],
        ..attach.clone()
    };
    assert_eq!(eligibility(&named, &none), Eligibility::Attach);
    let other = RotationConfig {
        uids: vec![1001],
        ..attach
    };
    assert!(matches!(eligibility(&other, &none), Eligibility::No(_)));
    // Attach disabled wins over everything.
    let disabled = Candidate {
        attach_disabled: true,
        ..jvm(AgentState::Dormant)
    };
    assert!(matches!(eligibility(&all, &disabled), Eligibility::No(_)));
}

#[test]
fn filters_narrow_the_fleet_each_kind_must_match() {
    let c = |main: &[&str], uids: &[u32], cgroups: &[&str]| RotationConfig {
        main_class: main.iter().map(|s| s.to_string()).collect(),
        uids: uids.to_vec(),
        cgroups: cgroups.iter().map(|s| s.to_string()).collect(),
        budget_percent: Percent::new(1.0).unwrap(),
        ..RotationConfig::default()
    };
    let j = jvm(AgentState::Dormant);
    let yes = |cfg: RotationConfig| eligibility(&cfg, &j) == Eligibility::Dormant;
    assert!(yes(c(&["com.acme.*"], &[], &[])));
    assert!(yes(c(&["org.*", "*Shop"], &[], &[])));
    assert!(!yes(c(&["org.*"], &[], &[])));
    assert!(yes(c(&["com.acme.*"], &[1000, 0], &["/system.slice"])));
    assert!(!yes(c(&["com.acme.*"], &[0], &["/system.slice"])));
    assert!(!yes(c(&["com.acme.*"], &[1000], &["/user.slice"])));
    assert!(yes(c(&[], &[], &["/system.slice/shop.service"])));
    assert!(!yes(c(&[], &[], &["/system.slice/shop"])));
}

#[test]
fn globs_and_cgroup_prefixes() {
    assert!(glob_match("*", ""));
    assert!(glob_match("*", "a.b.C"));
    assert!(glob_match("com.*.Main", "com.acme.shop.Main"));
    assert!(!glob_match("com.*.Main", "com.acme.MainX"));
    assert!(glob_match("a?c", "abc"));
    assert!(!glob_match("a?c", "ac"));
    assert!(glob_match("*a*b", "xxaxxab"));
    assert!(!glob_match("abc", "abcd"));
    assert!(cgroup_under("/a/b", "/a"));
    assert!(cgroup_under("/a", "/a/"));
    assert!(!cgroup_under("/ab", "/a"));
    assert!(cgroup_under("/anything", "/"));
    assert!(!cgroup_under("", "/"));
}
