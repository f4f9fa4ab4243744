//! Pod orderings: which pods to update first (index §1.4, then priority and
//! scatter, spec 02 §4.2–4.3) and which to delete first on scale-in
//! (spec 03 §6.4).

use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruise_api::common::{UpdatePriorityStrategy, UpdateScatterTerm};

use super::pod_state::{
    created_at, deletion_cost, has_ready_condition, is_available, label, max_restarts, node_name,
    phase, ready_since,
};

fn phase_rank(pod: &Pod) -> u8 {
    match phase(pod) {
        "Unknown" => 1,
        "Running" => 2,
        _ => 0,
    }
}

/// Earlier is "more recent"; a missing time counts as the latest.
fn later_first(a: Option<Timestamp>, b: Option<Timestamp>) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(a), Some(b)) => b.cmp(&a),
    }
}

/// k8s `ActivePods.Less`: the pods cheapest to disturb come first.
pub fn active_pods_order(a: &Pod, b: &Pod) -> Ordering {
    node_name(a)
        .is_empty()
        .cmp(&node_name(b).is_empty())
        .reverse()
        .then_with(|| phase_rank(a).cmp(&phase_rank(b)))
        .then_with(|| has_ready_condition(a).cmp(&has_ready_condition(b)))
        .then_with(|| {
            if has_ready_condition(a) && has_ready_condition(b) {
                later_first(ready_since(a), ready_since(b))
            } else {
                Ordering::Equal
            }
        })
        .then_with(|| max_restarts(b).cmp(&max_restarts(a)))
        .then_with(|| later_first(created_at(a), created_at(b)))
}

/// Same-node ranks: when several pods share a node, all but the one best
/// kept there (the last in deletion order) get ranks n-1..1, so a crowded
/// node loses pods first. Pods alone on a node, or unscheduled, rank 0.
fn same_node_ranks(pods: &[&Pod], min_ready_seconds: i32, now: Timestamp) -> Vec<usize> {
    let mut by_node: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (index, pod) in pods.iter().enumerate() {
        if !node_name(pod).is_empty() {
            by_node.entry(node_name(pod)).or_default().push(index);
        }
    }
    let mut ranks = vec![0; pods.len()];
    for mut members in by_node.into_values() {
        crate::ordered::sort_by(&mut members, |&a, &b| {
            scale_in_base_order(pods[a], pods[b], min_ready_seconds, now)
                .then_with(|| scale_in_tie_break(pods[a], pods[b]))
        });
        let crowd = members.len();
        for (position, &index) in members.iter().enumerate() {
            ranks[index] = crowd - 1 - position;
        }
    }
    ranks
}

/// §6.4 steps 1–5: state before cost.
fn scale_in_base_order(a: &Pod, b: &Pod, min_ready_seconds: i32, now: Timestamp) -> Ordering {
    node_name(a)
        .is_empty()
        .cmp(&node_name(b).is_empty())
        .reverse()
        .then_with(|| phase_rank(a).cmp(&phase_rank(b)))
        .then_with(|| {
            is_available(a, min_ready_seconds, now).cmp(&is_available(b, min_ready_seconds, now))
        })
        .then_with(|| has_ready_condition(a).cmp(&has_ready_condition(b)))
        .then_with(|| deletion_cost(a).cmp(&deletion_cost(b)))
}

/// §6.4 steps 7–9: the tie-breakers after the rank.
fn scale_in_tie_break(a: &Pod, b: &Pod) -> Ordering {
    let both_ready = has_ready_condition(a) && has_ready_condition(b);
    (if both_ready {
        later_first(ready_since(a), ready_since(b))
    } else {
        Ordering::Equal
    })
    .then_with(|| max_restarts(b).cmp(&max_restarts(a)))
    .then_with(|| later_first(created_at(a), created_at(b)))
}

/// Sorts `pods` so the first ones are the ones to delete on scale-in.
///
/// The topology-spread ranker needs node topology labels a pure planner is
/// not given, so the same-node ranker is used for every template.
pub fn sort_for_scale_in(pods: &mut [&Pod], min_ready_seconds: i32, now: Timestamp) {
    let ranks = same_node_ranks(pods, min_ready_seconds, now);
    let mut indexed: Vec<(usize, &Pod)> = ranks.into_iter().zip(pods.iter().copied()).collect();
    crate::ordered::sort_by(&mut indexed, |(rank_a, a), (rank_b, b)| {
        scale_in_base_order(a, b, min_ready_seconds, now)
            .then_with(|| rank_b.cmp(rank_a))
            .then_with(|| scale_in_tie_break(a, b))
    });
    for (slot, (_, pod)) in pods.iter_mut().zip(indexed) {
        *slot = pod;
    }
}

/// Trailing decimal digits of a label value (`sts-10` → 10, none → 0).
fn trailing_number(value: &str) -> i64 {
    let digits = value.len() - value.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    value[value.len() - digits..].parse().unwrap_or(0)
}

/// priorityStrategy: a stable re-sort, so equal pods keep the earlier order.
pub fn sort_by_priority(pods: &mut [&Pod], strategy: &UpdatePriorityStrategy) {
    if !strategy.weight_priority.is_empty() {
        let score = |pod: &Pod| -> i64 {
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            strategy
                .weight_priority
                .iter()
                .filter(|term| {
                    crate::selector::matches(&term.match_selector, &labels).unwrap_or(false)
                })
                .map(|term| i64::from(term.weight))
                .sum()
        };
        crate::ordered::sort_by_key(pods, |pod| std::cmp::Reverse(score(pod)));
    } else if !strategy.order_priority.is_empty() {
        // Level = first ordered key the pod carries; pods with none come
        // first (-1), then higher trailing numbers first within a level.
        let key = |pod: &Pod| -> (i64, std::cmp::Reverse<i64>) {
            strategy
                .order_priority
                .iter()
                .enumerate()
                .find_map(|(level, term)| {
                    label(pod, &term.ordered_key).map(|value| {
                        (
                            i64::try_from(level).unwrap_or(i64::MAX),
                            std::cmp::Reverse(trailing_number(value)),
                        )
                    })
                })
                .unwrap_or((-1, std::cmp::Reverse(0)))
        };
        crate::ordered::sort_by_key(pods, |pod| key(pod));
    }
}

/// scatterStrategy: spreads pods carrying each `key=value` evenly through
/// the list, terms with more matching pods first. Matching pods keep their
/// relative order and take the slots `floor(i * n / m)`; the others fill
/// the remaining slots in order.
pub fn scatter(pods: &mut Vec<&Pod>, terms: &[UpdateScatterTerm]) {
    let matches =
        |pod: &Pod, term: &UpdateScatterTerm| label(pod, &term.key) == Some(term.value.as_str());
    let mut ordered: Vec<&UpdateScatterTerm> = terms.iter().collect();
    crate::ordered::sort_by_key(&mut ordered, |term| {
        std::cmp::Reverse(pods.iter().filter(|p| matches(p, term)).count())
    });
    for term in ordered {
        let (hits, rest): (Vec<&Pod>, Vec<&Pod>) = pods.iter().partition(|p| matches(p, term));
        let (total, count) = (pods.len(), hits.len());
        if count == 0 || count == total {
            continue;
        }
        let slots: Vec<usize> = (0..count).map(|i| i * total / count).collect();
        let (mut hits, mut rest) = (hits.into_iter(), rest.into_iter());
        let mut next_slot = slots.iter().peekable();
        let mut result = Vec::with_capacity(total);
        for position in 0..total {
            let take_hit = next_slot.peek().is_some_and(|&&slot| slot == position);
            let source = if take_hit {
                next_slot.next();
                hits.next()
            } else {
                rest.next()
            };
            result.extend(source);
        }
        *pods = result;
    }
}
