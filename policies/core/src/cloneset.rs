//! CloneSet rollout planning (spec 03 §6–§8): given a CloneSet, its pods,
//! its revisions and the time, decide this round's writes. The controller
//! performs them; nothing here talks to the cluster or reads a clock.
//!
//! Entry points: [`plan`] and [`compute_status`].
//!
//! Where the planner knowingly differs from a literal port: Update takes
//! pods already marked for deletion first (see `update.rs`), the
//! topology-spread scale-in ranker is not modelled (no node topology in the
//! input), and the scatter sort is our own even spread.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::jiff::Timestamp;
use kruise_api::CloneSet;

pub mod claims;
mod diffs;
mod in_place;
pub mod in_place_apply;
pub mod intorstr;
mod lifecycle;
pub mod new_pod;
mod plan;
mod pod_state;
mod pods_to_delete;
pub mod predownload;
pub mod progress;
pub mod revision;
mod scale;
mod settings;
mod sort;
mod status;
mod update;
pub mod validation;

pub use diffs::{Diffs, Pass, calculate_diffs};
pub use in_place::{InPlaceUpdateSpec, calculate_in_place_update, is_in_place_update_completed};
pub use lifecycle::{
    PRE_DELETE_HOLD, PRE_UPDATE_HOLD, READINESS_USER_AGENT, hold_before_move, readiness_condition,
};
pub use plan::{
    InPlaceCompletion, InPlaceUpdate, LifecycleChange, Plan, PlanError, PodCreation,
    ReadinessChange, Stage,
};
pub use pod_state::{
    LifecycleState, condition, container_status, has_ready_condition, is_active, is_at_revision,
    is_available, is_running_and_ready,
};
pub use pods_to_delete::pruned_pods_to_delete;
pub use settings::{MAX_COUNT, Settings};
pub use sort::{active_pods_order, scatter, sort_by_priority, sort_for_scale_in};
pub use status::{CONDITION_FAILED_SCALE, CONDITION_FAILED_UPDATE, compute_status, note_failure};

pub const LABEL_REVISION: &str = "controller-revision-hash";
pub const LABEL_POD_TEMPLATE_HASH: &str = "pod-template-hash";
pub const LABEL_INSTANCE_ID: &str = "apps.kruise.io/cloneset-instance-id";
pub const LABEL_SPECIFIED_DELETE: &str = "apps.kruise.io/specified-delete";
pub const LABEL_LIFECYCLE_STATE: &str = "lifecycle.apps.kruise.io/state";
pub const LABEL_EXCLUDE_PREPARING_DELETE: &str =
    "apps.kruise.io/cloneset-scaling-exclude-preparing-delete";
pub const ANNOTATION_IN_PLACE_UPDATE_STATE: &str = "apps.kruise.io/inplace-update-state";
pub const ANNOTATION_IN_PLACE_UPDATE_GRACE: &str = "apps.kruise.io/inplace-update-grace";
pub const ANNOTATION_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
pub const CONDITION_IN_PLACE_UPDATE_READY: &str = "InPlaceUpdateReady";

/// Feature gates that change planning (spec index §1.7); both default off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeatureGates {
    /// `CloneSetPartitionRollback`: a raised partition moves pods back.
    pub partition_rollback: bool,
    /// `PreparingUpdateAsUpdate`: Scale counts `PreparingUpdate` pods as updated.
    pub preparing_update_as_update: bool,
}

/// The revisions as plain data: names and the pod template each one holds
/// (a ControllerRevision's payload). `current` and `update` name two of
/// `templates`' keys; pods may carry any of them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Revisions {
    pub current: String,
    pub update: String,
    pub templates: BTreeMap<String, PodTemplateSpec>,
}

impl Revisions {
    /// The template of the revision a pod label names, matched in full or by
    /// short hash like the revision label itself.
    pub fn template_of(&self, revision: &str) -> Option<&PodTemplateSpec> {
        self.templates.get(revision).or_else(|| {
            let hash = pod_state::short_hash(revision);
            self.templates
                .iter()
                .find(|(name, _)| pod_state::short_hash(name) == hash)
                .map(|(_, template)| template)
        })
    }
}

/// Everything one planning round looks at.
#[derive(Clone, Copy, Debug)]
pub struct PlanInput<'a> {
    pub cloneset: &'a CloneSet,
    /// Pods owned by the CloneSet; inactive ones are ignored.
    pub pods: &'a [Pod],
    pub revisions: &'a Revisions,
    pub now: Timestamp,
    pub gates: FeatureGates,
}

/// One reconcile round (spec 03 §5 step 6): Scale, and Update only if Scale
/// wrote nothing.
pub fn plan(input: &PlanInput<'_>) -> Plan {
    plan_passes(input, true)
}

/// The round again when its Scale pass could create none of the pods it
/// planned (a quota, a webhook refusing them): as in OpenKruise, whose
/// Scale pass counts as a change only once a pod is made, the Update pass
/// runs instead, so a rollout goes on while new pods are refused.
pub fn plan_after_refused_creates(input: &PlanInput<'_>) -> Plan {
    plan_passes(input, false)
}

fn plan_passes(input: &PlanInput<'_>, with_scale: bool) -> Plan {
    let settings = Settings::resolve(input.cloneset, input.revisions, input.gates);
    let pods: Vec<&Pod> = input.pods.iter().filter(|pod| is_active(pod)).collect();
    let mut plan = Plan::default();
    if with_scale && scale::plan_scale(&settings, &pods, input.now, &mut plan) {
        plan.stage = Stage::Scale;
    } else if update::plan_update(
        input.cloneset,
        &settings,
        input.revisions,
        &pods,
        input.now,
        &mut plan,
    ) {
        plan.stage = if plan.in_place_update.is_empty()
            && plan.mark_specified_delete.is_empty()
            && !plan
                .lifecycle
                .iter()
                .any(|c| c.to == LifecycleState::PreparingUpdate)
        {
            Stage::Refresh
        } else {
            Stage::Update
        };
    }
    if let Some(wait) = min_ready_requeue(&settings, &pods, input.now) {
        plan.requeue_after_seconds = Some(plan.requeue_after_seconds.map_or(wait, |r| r.min(wait)));
    }
    plan
}

/// Spec 03 §5 step 10: with minReadySeconds, come back when the next ready
/// pod turns available.
fn min_ready_requeue(settings: &Settings, pods: &[&Pod], now: Timestamp) -> Option<i64> {
    if settings.min_ready_seconds <= 0 {
        return None;
    }
    pods.iter()
        .filter(|pod| {
            is_running_and_ready(pod) && !is_available(pod, settings.min_ready_seconds, now)
        })
        .filter_map(|pod| pod_state::ready_since(pod))
        .map(|since| since.as_second() + i64::from(settings.min_ready_seconds) - now.as_second())
        .map(|left| left.max(1))
        .min()
}
