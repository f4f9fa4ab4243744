//! The CloneSet's rollout knobs resolved to numbers once per plan
//! (spec 03 §6.2 header), so every pass reads the same values.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::CloneSet;
use kruise_api::cloneset::{CloneSetUpdateStrategyType, Lifecycle};

use super::intorstr::{calculate_partition_replicas, value_from_int_or_percent};
use super::{FeatureGates, LABEL_EXCLUDE_PREPARING_DELETE, Revisions};

/// The most replicas, surge or unavailability a plan counts with. No
/// cluster holds this many pods, and it keeps every sum the planner makes
/// of these numbers (and of pod counts) inside `i32`, whatever a stored
/// CloneSet says.
pub const MAX_COUNT: i32 = i32::MAX / 4;

/// Resolved values; unparsable int-or-percents count as 0 like upstream,
/// which ignores those errors (the webhook rejects them anyway). Every
/// count is within `[0, MAX_COUNT]`: a negative one (which the webhook
/// refuses) counts as 0.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub replicas: i32,
    pub partition: i32,
    pub max_surge: i32,
    pub max_unavailable: i32,
    pub scale_max_unavailable: i32,
    pub min_ready_seconds: i32,
    pub paused: bool,
    pub strategy: CloneSetUpdateStrategyType,
    pub exclude_preparing_delete: bool,
    pub pods_to_delete: Vec<String>,
    pub grace_period_seconds: i32,
    pub current_revision: String,
    pub update_revision: String,
    pub gates: FeatureGates,
    pub lifecycle: Lifecycle,
}

impl Settings {
    pub fn resolve(cloneset: &CloneSet, revisions: &Revisions, gates: FeatureGates) -> Self {
        let spec = &cloneset.spec;
        let replicas = bounded(spec.replicas.unwrap_or(1));
        let mut strategy = spec.update_strategy.clone().unwrap_or_default();
        let on_delete = strategy.type_ == Some(CloneSetUpdateStrategyType::OnDelete);
        if on_delete {
            // No rolling update: partition 0, no surge, and the default
            // 20 %, rounded down, for the scale pass (spec 03 §6.2).
            strategy.partition = None;
            strategy.max_surge = None;
            strategy.max_unavailable = None;
        }
        let paused = strategy.paused;
        let partition =
            calculate_partition_replicas(strategy.partition.as_ref(), Some(replicas)).unwrap_or(0);
        // Surge is switched off while paused so a paused rollout does not
        // keep extra pods around.
        let max_surge = match (&strategy.max_surge, paused) {
            (Some(surge), false) => {
                bounded(value_from_int_or_percent(surge, replicas, true).unwrap_or(0))
            }
            _ => 0,
        };
        let default_unavailable = IntOrString::String("20%".to_owned());
        let max_unavailable = bounded(
            value_from_int_or_percent(
                strategy
                    .max_unavailable
                    .as_ref()
                    .unwrap_or(&default_unavailable),
                replicas,
                max_surge == 0 && !on_delete,
            )
            .unwrap_or(0),
        );
        let scale = spec.scale_strategy.clone().unwrap_or_default();
        let scale_max_unavailable = scale.max_unavailable.as_ref().map_or(MAX_COUNT, |v| {
            bounded(value_from_int_or_percent(v, replicas, true).unwrap_or(0))
        });
        let exclude_preparing_delete = cloneset
            .metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(LABEL_EXCLUDE_PREPARING_DELETE))
            .is_some_and(|value| value == "true");
        Self {
            replicas,
            partition,
            max_surge,
            max_unavailable,
            scale_max_unavailable,
            min_ready_seconds: spec.min_ready_seconds.unwrap_or(0).max(0),
            paused,
            strategy: strategy.type_.unwrap_or_default(),
            exclude_preparing_delete,
            pods_to_delete: scale.pods_to_delete,
            grace_period_seconds: strategy
                .in_place_update_strategy
                .map_or(0, |s| s.grace_period_seconds),
            current_revision: revisions.current.clone(),
            update_revision: revisions.update.clone(),
            gates,
            lifecycle: spec.lifecycle.clone().unwrap_or_default(),
        }
    }
}

fn bounded(count: i32) -> i32 {
    count.clamp(0, MAX_COUNT)
}
