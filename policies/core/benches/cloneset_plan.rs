//! CloneSet planning cost and write economy.
//!
//! `cargo bench -p kruise-core --bench cloneset_plan` times one planning
//! round and one status computation over 10,000 pods mid-rollout, then
//! prints how many API writes a whole rollout of 100 pods took against the
//! fewest it could (each old pod replaced once: one create and one delete
//! for ReCreate, one in-place update for InPlaceIfPossible).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/cloneset_common/mod.rs"]
mod common;

use std::hint::black_box;

use common::{REV_A, REV_B, Sim, cloneset, image_revisions, pods, t0};
use criterion::{Criterion, criterion_group, criterion_main};
use kruise_core::cloneset::{FeatureGates, Plan, PlanInput, compute_status, plan};
use serde_json::json;

fn mid_rollout(replicas: usize) -> (kruise_api::CloneSet, Vec<k8s_openapi::api::core::v1::Pod>) {
    let count = i32::try_from(replicas).unwrap();
    let set = cloneset(count, "0", "10%", "1%");
    let mut all = pods("a", replicas / 2, REV_A);
    all.extend(pods("b", replicas - replicas / 2, REV_B));
    (set, all)
}

fn planning(c: &mut Criterion) {
    let (set, all) = mid_rollout(10_000);
    let revisions = image_revisions(REV_A, REV_B);
    let input = PlanInput {
        cloneset: &set,
        pods: &all,
        revisions: &revisions,
        now: t0(),
        gates: FeatureGates::default(),
    };
    c.bench_function("plan, 10,000 pods mid-rollout", |b| {
        b.iter(|| plan(black_box(&input)));
    });
    c.bench_function("status, 10,000 pods", |b| {
        b.iter(|| compute_status(black_box(&set), &all, &revisions, None, t0()));
    });
}

/// Pod writes by kind: creates, deletes, specified-delete marks, lifecycle
/// labels, in-place updates, in-place completions (status), other.
fn writes(plan: &Plan) -> [usize; 7] {
    [
        plan.create
            .iter()
            .map(|c| usize::try_from(c.count).unwrap())
            .sum::<usize>(),
        plan.delete.len(),
        plan.mark_specified_delete.len(),
        plan.lifecycle.len(),
        plan.in_place_update.len(),
        plan.in_place_complete.len(),
        plan.apply_graced.len() + plan.template_hash_fix.len(),
    ]
}

/// Rolls 100 pods from A to B, pods turning ready between rounds; returns
/// (writes by kind, rounds).
fn rollout(strategy: &str) -> ([usize; 7], usize) {
    let mut set = cloneset(100, "0", "10%", "10%");
    set.spec.update_strategy.as_mut().unwrap().type_ =
        serde_json::from_value(json!(strategy)).unwrap();
    let mut sim = Sim::new(set, pods("a", 100, REV_A), image_revisions(REV_A, REV_B));
    sim.fold_gate_opening = false;
    let (mut total, mut rounds) = ([0; 7], 0);
    loop {
        let plan = sim.reconcile();
        rounds += 1;
        for (sum, count) in total.iter_mut().zip(writes(&plan)) {
            *sum += count;
        }
        sim.make_ready(None);
        sim.reap();
        let columns = sim.columns();
        if !plan.modifies()
            && columns.updated == 100
            && columns.total == 100
            && columns.ready == 100
        {
            return (total, rounds);
        }
        assert!(rounds < 10_000, "the rollout did not converge");
    }
}

fn write_economy(_: &mut Criterion) {
    for (strategy, minimum) in [("ReCreate", 200), ("InPlaceIfPossible", 100)] {
        let (kinds, rounds) = rollout(strategy);
        let all: usize = kinds.iter().sum();
        let [create, delete, mark, lifecycle, in_place, complete, other] = kinds;
        println!(
            "rollout of 100 pods, {strategy}: {all} pod writes in {rounds} rounds (fewest possible: {minimum}): \
             {create} creates, {delete} deletes, {mark} specified-delete marks, {lifecycle} lifecycle labels, \
             {in_place} in-place updates, {complete} InPlaceUpdateReady=True (with the lifecycle label), {other} other"
        );
    }
}

criterion_group!(benches, planning, write_economy);
criterion_main!(benches);
