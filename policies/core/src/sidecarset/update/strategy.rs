//! Choosing the next pods to upgrade (spec 02 §4, `GetNextUpgradePods`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::SidecarSet;
use kruise_api::common::UpdateScatterTerm;

use super::UpdateError;
use super::consistency::{is_consistent, is_consistent_and_ready, is_ready};
use super::pods::{is_updated, sidecar_container_names, status, without_image_hash_matches};
use crate::cloneset::intorstr::{
    NotAPercent, calculate_partition_replicas, value_from_int_or_percent,
};
use crate::cloneset::{active_pods_order, scatter, sort_by_priority};
use crate::selector;
use crate::sidecarset::sidecar_set_name;

/// The strategy's choice for this round.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NextUpgrade<'a> {
    /// Pods to upgrade now, in order.
    pub upgrade: Vec<&'a Pod>,
    /// Outdated pods whose without-image hash differs: never upgraded in place.
    pub not_upgradable: Vec<&'a Pod>,
}

/// Spec 02 §4 over the matched pods: the outdated pods the canary selector
/// picks, minus the not-upgradable ones and those still finishing an
/// earlier upgrade, sorted (ActivePods order, priority, scatter), cut by the
/// partition and then by `maxUnavailable` (pods that are not ready are
/// taken without using the budget).
pub fn next_upgrade_pods<'a>(
    sidecar_set: &SidecarSet,
    matched: &[&'a Pod],
) -> Result<NextUpgrade<'a>, UpdateError> {
    let strategy = sidecar_set.spec.update_strategy.clone().unwrap_or_default();
    let name = sidecar_set_name(sidecar_set);
    let mut next = NextUpgrade::default();
    let mut waiting: Vec<&Pod> = Vec::new();
    for &pod in matched {
        if is_updated(sidecar_set, pod) || !canary_selected(sidecar_set, pod)? {
            continue;
        }
        if !without_image_hash_matches(sidecar_set, pod) {
            next.not_upgradable.push(pod);
        } else if !is_finishing_upgrade(sidecar_set, pod) {
            waiting.push(pod);
        }
    }

    crate::ordered::sort_by(&mut waiting, |a, b| active_pods_order(a, b));
    if let Some(priority) = &strategy.priority_strategy {
        sort_by_priority(&mut waiting, priority);
    }
    if !strategy.scatter_strategy.is_empty() {
        let terms = expand_scatter_terms(&strategy.scatter_strategy, matched);
        scatter(&mut waiting, &terms);
    }

    let total = i32::try_from(matched.len()).unwrap_or(i32::MAX);
    let invalid = |field| {
        move |source: NotAPercent| UpdateError::InvalidIntOrPercent {
            sidecar_set: name.to_owned(),
            field,
            source,
        }
    };
    let partition = calculate_partition_replicas(strategy.partition.as_ref(), Some(total))
        .map_err(invalid("spec.updateStrategy.partition"))?;
    let max_unavailable = value_from_int_or_percent(
        strategy
            .max_unavailable
            .as_ref()
            .unwrap_or(&IntOrString::Int(1)),
        total,
        true,
    )
    .map_err(invalid("spec.updateStrategy.maxUnavailable"))?;

    let keep = usize::try_from(partition).unwrap_or(0);
    waiting.truncate(waiting.len().saturating_sub(keep));
    let mut unavailable = matched
        .iter()
        .filter(|pod| is_updated(sidecar_set, pod) && !is_consistent_and_ready(sidecar_set, pod))
        .count();
    let budget = usize::try_from(max_unavailable).unwrap_or(0);
    for pod in waiting {
        if is_ready(sidecar_set, pod) {
            if unavailable >= budget {
                break;
            }
            unavailable += 1;
        }
        next.upgrade.push(pod);
    }
    Ok(next)
}

/// No `updateStrategy.selector`, or it matches the pod's labels.
fn canary_selected(sidecar_set: &SidecarSet, pod: &Pod) -> Result<bool, UpdateError> {
    let Some(canary) = sidecar_set
        .spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.selector.as_ref())
    else {
        return Ok(true);
    };
    let empty = BTreeMap::new();
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    selector::matches(canary, labels).map_err(|source| UpdateError::InvalidSelector {
        sidecar_set: sidecar_set_name(sidecar_set).to_owned(),
        field: "spec.updateStrategy.selector",
        source,
    })
}

/// `IsSidecarSetUpgradable`'s second half: a sidecar container that is
/// Ready but not yet running its spec image is mid-upgrade; wait for it.
fn is_finishing_upgrade(sidecar_set: &SidecarSet, pod: &Pod) -> bool {
    let name = sidecar_set_name(sidecar_set);
    sidecar_container_names(sidecar_set)
        .into_iter()
        .any(|container| {
            let ready = status(pod, &container).is_some_and(|s| s.ready);
            ready && !is_consistent(name, pod, &std::iter::once(container).collect())
        })
}

/// `parseUpdateScatterTerms`: `value: "*"` becomes one term per value of
/// that label among `pods` (first-seen order); duplicates are dropped.
pub fn expand_scatter_terms(terms: &[UpdateScatterTerm], pods: &[&Pod]) -> Vec<UpdateScatterTerm> {
    let mut expanded: Vec<UpdateScatterTerm> = Vec::new();
    let mut insert = |term: UpdateScatterTerm| {
        if !expanded.contains(&term) {
            expanded.push(term);
        }
    };
    for term in terms {
        if term.value != "*" {
            insert(term.clone());
            continue;
        }
        for pod in pods {
            if let Some(value) = pod.metadata.labels.as_ref().and_then(|l| l.get(&term.key)) {
                insert(UpdateScatterTerm {
                    key: term.key.clone(),
                    value: value.clone(),
                });
            }
        }
    }
    expanded
}
