//! The status a reconcile writes (spec 07 §1.2).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kruise_api::ResourceDistribution;
use kruise_api::resourcedistribution::{
    ResourceDistributionCondition, ResourceDistributionConditionType as ConditionType,
    ResourceDistributionStatus,
};

use super::REASON_SUCCEEDED;
use super::plan::{Failure, Plan};

/// The status after a reconcile: `desired` targets, `succeeded` those with
/// an up-to-date copy, `failed` the rest, and always the six conditions in
/// order. A condition is `True` with the namespaces that hit it and the
/// message of the last of them; its `lastTransitionTime` moves to `now`
/// only when its status changed from the previous one at the same place.
pub fn compute_status(
    distribution: &ResourceDistribution,
    plan: &Plan,
    action_failures: &[Failure],
    now: Timestamp,
) -> ResourceDistributionStatus {
    let mut failures: Vec<&Failure> = plan.failures.iter().chain(action_failures).collect();
    crate::ordered::sort_by(&mut failures, |a, b| a.namespace.cmp(&b.namespace));
    let desired = plan.targets.matched.len();
    let failed_targets = plan
        .targets
        .matched
        .iter()
        .filter(|ns| failures.iter().any(|f| &f.namespace == *ns))
        .count();
    let previous = distribution
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let conditions = ConditionType::ALL
        .iter()
        .enumerate()
        .map(|(index, condition)| {
            let hits: Vec<&&Failure> = failures
                .iter()
                .filter(|f| f.condition == *condition)
                .collect();
            let mut namespaces: Vec<String> = hits.iter().map(|f| f.namespace.clone()).collect();
            namespaces.dedup();
            let status = if hits.is_empty() { "False" } else { "True" };
            let reason = hits
                .last()
                .map_or(REASON_SUCCEEDED, |f| f.message.as_str())
                .to_owned();
            let last_transition_time = previous
                .get(index)
                .filter(|c| c.type_ == *condition && c.status == status)
                .and_then(|c| c.last_transition_time.clone())
                .unwrap_or(Time(now));
            ResourceDistributionCondition {
                type_: *condition,
                status: status.to_owned(),
                last_transition_time: Some(last_transition_time),
                reason: Some(reason),
                failed_namespaces: namespaces,
            }
        })
        .collect();
    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    ResourceDistributionStatus {
        desired: count(desired),
        succeeded: count(desired - failed_targets),
        failed: count(failed_targets),
        observed_generation: distribution.metadata.generation,
        conditions,
    }
}

/// Whether `status` differs from what the distribution shows: OpenKruise
/// writes the status only then.
pub fn needs_status_write(
    distribution: &ResourceDistribution,
    status: &ResourceDistributionStatus,
) -> bool {
    distribution.status.as_ref() != Some(status)
}
