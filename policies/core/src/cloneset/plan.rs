//! The planner's output: the writes the controller should make this round.

use k8s_openapi::api::core::v1::PodCondition;

use super::diffs::Diffs;
use super::in_place::InPlaceUpdateSpec;
use super::pod_state::LifecycleState;

/// Pods to create on one revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodCreation {
    pub revision: String,
    pub count: i32,
}

/// A pod moved to another lifecycle state (label
/// `lifecycle.apps.kruise.io/state`). `mark_not_ready` asks for the
/// `KruisePodReady` condition to go False first (`markPodNotReady` hooks;
/// [`super::hold_before_move`]). `restore_hook` puts the inPlaceUpdate
/// hook's labels and finalizers back on the pod in the same write (an
/// `Updated` pod to be updated again waits for the hook's owner as a
/// `Normal` one does).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LifecycleChange {
    pub pod: String,
    pub to: LifecycleState,
    pub mark_not_ready: bool,
    pub restore_hook: bool,
}

/// The pod's `KruisePodReady` condition rewritten for its lifecycle state
/// ([`super::readiness_condition`]): a hold taken or let go.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadinessChange {
    pub pod: String,
    pub condition: PodCondition,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InPlaceUpdate {
    pub pod: String,
    pub spec: InPlaceUpdateSpec,
}

/// An in-place update whose pod now runs the new spec: set
/// `InPlaceUpdateReady=True` and, for a pod in `Updating`, move the
/// lifecycle state on (`to`). Freshly created pods get the condition this
/// way too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InPlaceCompletion {
    pub pod: String,
    pub to: Option<LifecycleState>,
}

/// Why a step could not do what it wanted; the controller reports these
/// through the `FailedUpdate` condition.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// `InPlaceOnly` but the revision change is not in-place-able.
    #[error("pod {pod}: InPlaceOnly, but the change cannot be made in place")]
    NotInPlaceUpdatable { pod: String },
    /// The pod's (or target) revision is not among the given revisions.
    #[error("pod {pod}: revision {revision} is not among the CloneSet's revisions")]
    UnknownRevision { pod: String, revision: String },
}

/// Which pass produced the plan (Update runs only if Scale did nothing).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Stage {
    #[default]
    Idle,
    Scale,
    Refresh,
    Update,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub stage: Stage,
    pub create: Vec<PodCreation>,
    /// Pods (and their PVCs) to delete now.
    pub delete: Vec<String>,
    /// Pods to label `apps.kruise.io/specified-delete=true` (ReCreate update).
    pub mark_specified_delete: Vec<String>,
    pub lifecycle: Vec<LifecycleChange>,
    pub readiness: Vec<ReadinessChange>,
    pub in_place_update: Vec<InPlaceUpdate>,
    pub in_place_complete: Vec<InPlaceCompletion>,
    /// In-place updates whose grace period has passed: apply the stored spec.
    pub apply_graced: Vec<String>,
    /// Pods missing `pod-template-hash`: (pod, value to set).
    pub template_hash_fix: Vec<(String, String)>,
    /// `scaleUpNum > scaleUpLimit`: emit the `ScaleUpLimited` warning.
    pub scale_up_limited: bool,
    pub errors: Vec<PlanError>,
    /// Diffs of the Scale pass, and of the Update pass if it ran.
    pub scale_diffs: Diffs,
    pub update_diffs: Option<Diffs>,
    /// Reconcile again after this many seconds (minReadySeconds, grace).
    pub requeue_after_seconds: Option<i64>,
}

impl Plan {
    /// The plan asks for at least one write.
    pub fn modifies(&self) -> bool {
        !(self.create.is_empty()
            && self.delete.is_empty()
            && self.mark_specified_delete.is_empty()
            && self.lifecycle.is_empty()
            && self.readiness.is_empty()
            && self.in_place_update.is_empty()
            && self.in_place_complete.is_empty()
            && self.apply_graced.is_empty()
            && self.template_hash_fix.is_empty())
    }
}
