//! Property tests of the CloneSet planner over random CloneSets, pod states
//! and event orders (issue 6 "Done when"): pods never exceed replicas +
//! maxSurge, the controller never takes availability below replicas −
//! maxUnavailable once reached, the partition is respected, and a rollout
//! converges within a bound.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cloneset_common;

use cloneset_common::{
    Deletion, REV_A, REV_B, Sim, cloneset, image_revisions, pods, ready_pod, set_label, unready_pod,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::CloneSet;
use kruise_api::cloneset::CloneSetUpdateStrategyType;
use kruise_core::cloneset::intorstr::value_from_int_or_percent;
use kruise_core::cloneset::{
    FeatureGates, LABEL_SPECIFIED_DELETE, Settings, compute_status, is_active, is_at_revision,
    is_available,
};
use proptest::prelude::*;

fn int_or_percent(max_int: i32) -> impl Strategy<Value = String> {
    prop_oneof![
        (0..=max_int).prop_map(|n| n.to_string()),
        (0..=100_i32).prop_map(|p| format!("{p}%")),
    ]
}

fn strategy_type() -> impl Strategy<Value = CloneSetUpdateStrategyType> {
    prop_oneof![
        Just(CloneSetUpdateStrategyType::ReCreate),
        Just(CloneSetUpdateStrategyType::InPlaceIfPossible),
        Just(CloneSetUpdateStrategyType::InPlaceOnly),
    ]
}

#[derive(Clone, Debug)]
struct Config {
    replicas: i32,
    partition: String,
    max_unavailable: String,
    max_surge: String,
    type_: CloneSetUpdateStrategyType,
    min_ready_seconds: i32,
}

/// Random CloneSets the validating webhook would admit: InPlaceOnly has no
/// surge, and with replicas > 0 not both budgets round up to zero.
fn config() -> impl Strategy<Value = Config> {
    (
        0..20_i32,
        int_or_percent(25),
        int_or_percent(5),
        int_or_percent(5),
        strategy_type(),
        0..4_i32,
    )
        .prop_map(
            |(replicas, partition, max_unavailable, max_surge, type_, min_ready_seconds)| {
                let max_surge = if type_ == CloneSetUpdateStrategyType::InPlaceOnly {
                    "0".to_owned()
                } else {
                    max_surge
                };
                Config {
                    replicas,
                    partition,
                    max_unavailable,
                    max_surge,
                    type_,
                    min_ready_seconds,
                }
            },
        )
        .prop_filter("rejected by validation", |c| {
            let scaled = |v: &str| {
                let v = v
                    .parse::<i32>()
                    .map_or_else(|_| IntOrString::String(v.to_owned()), IntOrString::Int);
                value_from_int_or_percent(&v, c.replicas, true).unwrap()
            };
            c.replicas == 0 || scaled(&c.max_unavailable) >= 1 || scaled(&c.max_surge) >= 1
        })
}

fn build(config: &Config) -> CloneSet {
    let mut cs = cloneset(
        config.replicas,
        &config.partition,
        &config.max_unavailable,
        &config.max_surge,
    );
    cs.spec.update_strategy.as_mut().unwrap().type_ = Some(config.type_);
    cs.spec.min_ready_seconds = Some(config.min_ready_seconds);
    cs
}

/// Resolved (replicas, partition, maxSurge, maxUnavailable).
fn limits(cs: &CloneSet) -> (i32, i32, i32, i32) {
    let s = Settings::resolve(cs, &image_revisions(REV_A, REV_B), FeatureGates::default());
    (s.replicas, s.partition, s.max_surge, s.max_unavailable)
}

fn count(sim: &Sim, keep: impl Fn(&Pod) -> bool) -> i32 {
    i32::try_from(sim.pods.iter().filter(|p| is_active(p) && keep(p)).count()).unwrap()
}

fn available(sim: &Sim) -> i32 {
    compute_status(&sim.cloneset, &sim.pods, &sim.revisions, None, sim.now).available_replicas
}

#[derive(Clone, Debug)]
enum Event {
    Reconcile,
    Ready(usize),
    Unready(usize),
    Reap,
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => Just(Event::Reconcile),
        2 => any::<usize>().prop_map(Event::Ready),
        1 => any::<usize>().prop_map(Event::Unready),
        1 => Just(Event::Reap),
    ]
}

fn is_marked(pod: &Pod) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(LABEL_SPECIFIED_DELETE))
}

/// One reconcile with the invariants checked around it.
///
/// Availability: spec §6.2 (like upstream) does not count a specified-delete
/// pod as unavailable, so `deleteReadyLimit` is larger by the number of
/// unavailable specified-delete pods; the bound allows exactly that slack
/// (see `cloneset_diffs::unready_specified_pod_is_not_in_the_delete_budget`).
/// Partition: pods the user marked for deletion are outside it, so it is
/// checked on old pods not marked.
fn checked_reconcile(sim: &mut Sim) -> Result<bool, TestCaseError> {
    let (replicas, partition, max_surge, max_unavailable) = limits(&sim.cloneset);
    let min_ready = sim.cloneset.spec.min_ready_seconds.unwrap_or(0);
    let now = sim.now;
    let available_before = available(sim);
    let forgotten = count(sim, |p| is_marked(p) && !is_available(p, min_ready, now));
    let old_before = count(sim, |p| !is_at_revision(p, REV_B) && !is_marked(p));
    let plan = sim.reconcile();
    let total = count(sim, |_| true);
    if !plan.create.is_empty() {
        prop_assert!(
            total <= replicas + max_surge,
            "created up to {total} > {replicas}+{max_surge}: {plan:?}"
        );
    }
    if available_before >= replicas - max_unavailable {
        let after = available(sim);
        prop_assert!(
            after >= replicas - max_unavailable - forgotten,
            "available {available_before} -> {after} (slack {forgotten}): {plan:?}"
        );
    }
    let old_after = count(sim, |p| !is_at_revision(p, REV_B) && !is_marked(p));
    if old_before >= partition {
        prop_assert!(
            old_after >= partition,
            "old pods {old_before} -> {old_after} < partition {partition}: {plan:?}"
        );
    }
    Ok(plan.modifies())
}

fn nth_active(sim: &Sim, index: usize) -> Option<String> {
    let active: Vec<&Pod> = sim.pods.iter().filter(|p| is_active(p)).collect();
    (!active.is_empty()).then(|| active[index % active.len()].metadata.name.clone().unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    /// A rollout from a steady state on revision A to revision B, under a
    /// random order of reconciles, pods becoming ready or unready, and late
    /// deletions finishing; then it must converge.
    #[test]
    fn rollout_holds_invariants_and_converges(
        config in config(),
        late_deletes in any::<bool>(),
        events in proptest::collection::vec(event(), 0..60),
    ) {
        let cs = build(&config);
        let replicas = usize::try_from(config.replicas).unwrap();
        let mut sim = Sim::new(cs.clone(), pods("p", replicas, REV_A), image_revisions(REV_A, REV_B));
        sim.deletion = if late_deletes { Deletion::Late } else { Deletion::Immediate };
        for event in events {
            match event {
                Event::Reconcile => { checked_reconcile(&mut sim)?; }
                Event::Ready(i) => if let Some(name) = nth_active(&sim, i) { sim.make_ready(Some(&name)); },
                Event::Unready(i) => if let Some(name) = nth_active(&sim, i) { sim.make_unready(&name); },
                Event::Reap => sim.reap(),
            }
        }
        // Settle: everything recovers, the controller keeps reconciling.
        let bound = 8 * replicas + 40;
        let mut rounds = 0;
        loop {
            sim.reap();
            sim.make_ready(None);
            let modified = checked_reconcile(&mut sim)?;
            let plan = sim.plan();
            // Steady: nothing to write, no minReadySeconds wait pending.
            if !modified && !plan.modifies() && plan.requeue_after_seconds.is_none() && sim.pods.iter().all(is_active) {
                break;
            }
            rounds += 1;
            prop_assert!(rounds <= bound, "no convergence after {bound} rounds: {:?}", sim.columns());
        }
        let (r, partition, _, _) = limits(&cs);
        let columns = sim.columns();
        prop_assert_eq!(columns.total, r);
        prop_assert_eq!(columns.ready, r);
        prop_assert_eq!(columns.updated, r - partition);
        prop_assert_eq!(columns.old, partition);
    }

    /// One plan over arbitrary pod states: creations respect the surge
    /// bound, every named pod exists and is acted on once, updates stay
    /// within updateNum, and the partition and availability hold.
    #[test]
    fn single_plan_over_random_pods(
        config in config(),
        states in proptest::collection::vec((any::<bool>(), 0..4_u8, any::<bool>()), 0..25),
    ) {
        let cs = build(&config);
        let mut all: Vec<Pod> = Vec::new();
        for (i, (updated, state, specified)) in states.iter().enumerate() {
            let revision = if *updated { REV_B } else { REV_A };
            let name = format!("p{i}");
            let mut pod = match state {
                1 => unready_pod(&name, revision),
                2 => {
                    let mut p = unready_pod(&name, revision);
                    p.spec.as_mut().unwrap().node_name = None;
                    set_label(&mut p, "lifecycle.apps.kruise.io/state", "PreparingNormal");
                    p
                }
                _ => ready_pod(&name, revision),
            };
            if *specified && *state == 3 {
                set_label(&mut pod, LABEL_SPECIFIED_DELETE, "true");
            }
            all.push(pod);
        }
        let mut sim = Sim::new(cs, all, image_revisions(REV_A, REV_B));
        let before: Vec<String> = sim.pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
        let plan = sim.plan();
        let mut touched: Vec<&String> = plan.delete.iter()
            .chain(&plan.mark_specified_delete)
            .chain(plan.in_place_update.iter().map(|u| &u.pod))
            .collect();
        for name in &touched {
            prop_assert!(before.contains(name), "unknown pod {name}");
        }
        let n = touched.len();
        kruise_core::ordered::sort(&mut touched);
        touched.dedup();
        prop_assert_eq!(touched.len(), n, "a pod acted on twice: {:?}", plan);
        if let Some(diffs) = plan.update_diffs {
            let updates = plan.mark_specified_delete.len() + plan.in_place_update.len();
            prop_assert!(updates <= usize::try_from(diffs.update_num.unsigned_abs()).unwrap());
        }
        if config.type_ == CloneSetUpdateStrategyType::ReCreate {
            prop_assert!(plan.in_place_update.is_empty());
        }
        checked_reconcile(&mut sim)?;
    }
}

/// Numbers a stored CloneSet may hold although the webhook refuses them:
/// the ends of int32, absurd and negative percentages, garbage.
fn hostile_int_or_percent() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("-2147483648".to_owned()),
        Just("2147483647".to_owned()),
        Just("9000000000000000000%".to_owned()),
        Just("-9000000000000000000%".to_owned()),
        Just("-5%".to_owned()),
        Just("12.5%".to_owned()),
        Just("1e309%".to_owned()),
        Just("NaN%".to_owned()),
        Just("lots".to_owned()),
        (0..=100_i32).prop_map(|p| format!("{p}%")),
        (-3..=3_i32).prop_map(|n| n.to_string()),
    ]
}

fn hostile_count() -> impl Strategy<Value = i32> {
    prop_oneof![
        Just(i32::MIN),
        Just(-1),
        Just(i32::MAX),
        Just(i32::MAX - 1),
        0..6_i32
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// Whatever the numbers, planning and status neither panic nor
    /// overflow (a debug build traps on overflow), and what is planned
    /// stays within the bounded counts.
    #[test]
    fn hostile_numbers_are_planned_without_overflow(
        replicas in hostile_count(),
        partition in hostile_int_or_percent(),
        max_unavailable in hostile_int_or_percent(),
        max_surge in hostile_int_or_percent(),
        type_ in strategy_type(),
        min_ready_seconds in hostile_count(),
        states in proptest::collection::vec((any::<bool>(), any::<bool>()), 0..6),
    ) {
        let mut cs = cloneset(replicas, &partition, &max_unavailable, &max_surge);
        cs.spec.update_strategy.as_mut().unwrap().type_ = Some(type_);
        cs.spec.min_ready_seconds = Some(min_ready_seconds);
        let all: Vec<Pod> = states
            .iter()
            .enumerate()
            .map(|(i, (updated, ready))| {
                let revision = if *updated { REV_B } else { REV_A };
                if *ready { ready_pod(&format!("p{i}"), revision) } else { unready_pod(&format!("p{i}"), revision) }
            })
            .collect();
        let (r, partition, surge, unavailable) = limits(&cs);
        for value in [r, partition, surge, unavailable] {
            prop_assert!((0..=kruise_core::cloneset::MAX_COUNT).contains(&value), "{value}");
        }
        let sim = Sim::new(cs, all, image_revisions(REV_A, REV_B));
        let plan = sim.plan();
        let created: i64 = plan.create.iter().map(|c| i64::from(c.count)).sum();
        prop_assert!(created <= i64::from(r) + i64::from(surge));
        let status = compute_status(&sim.cloneset, &sim.pods, &sim.revisions, None, sim.now);
        prop_assert!(status.replicas >= 0);
    }
}
