//! SidecarSet in-place upgrade planning (spec 02): given a SidecarSet, the
//! pods it could match and the time, decide this round's status and pod
//! writes. The controller performs them; nothing here talks to the cluster
//! or reads a clock.
//!
//! Entry points: [`plan_update`] (one reconcile round), [`compute_status`],
//! [`next_upgrade_pods`] (the strategy alone), [`hot_upgrade_step`] (where a
//! hot-upgraded sidecar of one pod stands), [`plan_revisions`] (the
//! ControllerRevision history) and the pod-event helpers
//! [`pod_update_enqueue`] / [`sidecar_sets_of_pod`].
//!
//! Where the planner knowingly differs from a literal port:
//! * Pods whose SidecarSet never injected them (no
//!   `kruise.io/sidecarset-injected-list` entry) are not matched, so the
//!   upstream back-fill of that annotation on upgrade never applies.
//! * The scatter sort is the CloneSet planner's even spread.
//! * Images are compared after `docker.io/library/` and `:latest`
//!   normalisation, so a kubelet reporting `docker.io/library/busybox:1.35.0`
//!   for `busybox:1.35.0` does not leave a pod looking inconsistent.
//! * An invalid `updateStrategy.selector`, `partition` or `maxUnavailable`
//!   is an [`UpdateError`] instead of silently upgrading nothing.
//! * Hot upgrade: the old twin is reset only once the working twins' own
//!   container statuses are Ready too (not just the pod condition), and a
//!   SidecarSet that goes back to the image the old twin still runs hands
//!   the work back to that twin instead of recording the pod as updated
//!   while the newer image keeps working.
//! * As spec 02 §3 orders it, `NotUpdate` and `paused` stop the round
//!   before the hot-upgrade reset phase.
//! * Revision names hash our JSON of the revision data, so they are stable
//!   across our builds but not equal to OpenKruise's.

mod change;
mod consistency;
mod events;
mod history;
mod hot;
mod pods;
mod status;
mod strategy;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruise_api::SidecarSet;
use kruise_api::sidecarset::{SidecarSetStatus, SidecarSetUpdateStrategyType};

use crate::cloneset::intorstr::NotAPercent;
use crate::selector::SelectorError;

pub use change::{ChangeKind, ConditionChange, PodChange};
pub use consistency::is_sidecar_container_update_completed;
pub use events::{pod_update_enqueue, sidecar_sets_of_pod};
pub use history::{
    CUSTOM_VERSION_LABEL, REVISION_OWNER_LABEL, RevisionPlan, RevisionWrite, active_revisions,
    plan_revisions, replace_revision, revision_data,
};
pub use hot::{HotUpgradeStep, hot_upgrade_step};
pub use status::{compute_status, upgradable_condition};
pub use strategy::{NextUpgrade, expand_scatter_terms, next_upgrade_pods};

/// On a pod: JSON map SidecarSet name → `{revision, updateTimestamp,
/// lastContainerStatuses: {container: {imageID}}}` (spec 02 §8).
pub const INPLACE_UPDATE_STATE_ANNOTATION: &str = "kruise.io/sidecarset-inplace-update-state";
/// Pod condition: may every SidecarSet upgrade this pod in place (§9)?
pub const UPGRADABLE_CONDITION: &str = "SidecarSetUpgradable";
/// Event on the SidecarSet when some pods cannot be upgraded in place.
pub const EVENT_NOT_UPGRADABLE_PODS: &str = "NotUpgradablePods";
/// Event on a pod after its old hot-upgrade twin was reset to the empty image.
pub const EVENT_RESET_CONTAINER_SUCCEED: &str = "ResetContainerSucceed";
/// Event on a pod when resetting the old twin failed.
pub const EVENT_RESET_CONTAINER_FAILED: &str = "ResetContainerFailed";

/// A pod's namespace and name.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
}

impl PodKey {
    pub fn of(pod: &Pod) -> Self {
        Self {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
        }
    }

    /// Whether `pod` is the one this key names, without copying its names
    /// (the comparison runs over every pod of a round).
    pub fn names(&self, pod: &Pod) -> bool {
        borrowed_key(pod) == (self.namespace.as_str(), self.name.as_str())
    }
}

/// A pod's namespace and name as [`PodKey`] reads them, borrowed.
fn borrowed_key(pod: &Pod) -> (&str, &str) {
    (
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// An upgrade the controller wrote and expects to see in its pod cache:
/// the pod's `kruise.io/sidecarset-hash` record shows `hash`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpectedHash {
    pub pod: PodKey,
    pub hash: String,
}

/// Everything one round looks at.
#[derive(Clone, Copy, Debug)]
pub struct UpdateInput<'a> {
    /// The SidecarSet as stored (defaulted, hashes stamped).
    pub sidecar_set: &'a SidecarSet,
    /// Pods it could match, from any namespace; matching is done here.
    /// Borrowed one by one, so a controller plans over its cache as it is
    /// instead of copying every pod for every round.
    pub pods: &'a [&'a Pod],
    /// Namespace name → labels, needed only for a `namespaceSelector`
    /// (a namespace missing here is out of scope).
    pub namespace_labels: &'a BTreeMap<String, BTreeMap<String, String>>,
    /// Name of the latest ControllerRevision (spec 02 §6), for the status and
    /// the pods' hash records.
    pub latest_revision: &'a str,
    /// The collision count used to name it.
    pub collision_count: Option<i32>,
    /// Upgrades written in earlier rounds and not yet confirmed by the
    /// controller (see [`UpdatePlan::expectations`]).
    pub expectations: &'a [ExpectedHash],
    pub now: Timestamp,
}

/// Where the round stopped (spec 02 §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// An earlier upgrade is not in the pod cache yet: write the status
    /// only and come back in a second.
    WaitForCache,
    /// `updateStrategy.type: NotUpdate`.
    NotUpdate,
    /// `updateStrategy.paused`.
    Paused,
    /// Hot-upgraded pods whose new twin took over get their old twin reset
    /// to the empty image; no new upgrades this round.
    ResetHotUpgrade,
    /// Every matched pod records the current hash.
    Finished,
    /// Upgrades chosen by the strategy (possibly none this round).
    Upgrade,
}

/// An event to record on the SidecarSet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidecarSetEvent {
    /// `Normal` or `Warning`.
    pub type_: &'static str,
    pub reason: &'static str,
    pub message: String,
}

/// What one round decided.
#[derive(Clone, Debug, PartialEq)]
pub struct UpdatePlan {
    /// The status to write, with `observedGeneration` = `metadata.generation`.
    pub status: SidecarSetStatus,
    /// It differs from the stored status, so it must be written.
    pub status_changed: bool,
    pub stage: Stage,
    /// Pod writes, in order; each is one PATCH guarded by the pod's
    /// `resourceVersion` (on conflict, plan again from fresh pods).
    pub pod_changes: Vec<PodChange>,
    /// Pods the SidecarSet cannot upgrade in place (its without-image hash
    /// changed since they were injected).
    pub not_upgradable: Vec<PodKey>,
    /// `SidecarSetUpgradable` condition patches for those pods (only where
    /// the condition changes).
    pub condition_changes: Vec<ConditionChange>,
    pub events: Vec<SidecarSetEvent>,
    /// For every upgrade written successfully, the controller should
    /// remember this and pass it back as [`UpdateInput::expectations`] until
    /// its pod cache shows the new hash.
    pub expectations: Vec<ExpectedHash>,
    pub requeue_after_seconds: Option<u32>,
}

/// A round that cannot be planned.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum UpdateError {
    #[error("SidecarSet {sidecar_set}: invalid {field}: {source}")]
    InvalidSelector {
        sidecar_set: String,
        field: &'static str,
        source: SelectorError,
    },
    #[error("SidecarSet {sidecar_set}: invalid {field}: {source}")]
    InvalidIntOrPercent {
        sidecar_set: String,
        field: &'static str,
        source: NotAPercent,
    },
    #[error("SidecarSet {sidecar_set}: patchPodMetadata cannot be applied to pod {pod}: {message}")]
    PatchPodMetadata {
        sidecar_set: String,
        pod: String,
        message: String,
    },
}

/// One reconcile round of the SidecarSet controller (spec 02 §3 steps 1,
/// 3–8): the matched pods, the status, then — unless waiting, `NotUpdate`
/// or paused — either the hot-upgrade resets or the next upgrade batch.
///
/// Register the revision first ([`plan_revisions`]) and pass its name as
/// [`UpdateInput::latest_revision`]. An invalid `spec.selector` fails the
/// whole round; when only the strategy is invalid, the status can still be
/// written from [`matching_pods`] and [`compute_status`].
pub fn plan_update(input: &UpdateInput<'_>) -> Result<UpdatePlan, UpdateError> {
    let sidecar_set = input.sidecar_set;
    let matched = matching_pods(sidecar_set, input.pods, input.namespace_labels)?;
    let status = compute_status(
        sidecar_set,
        &matched,
        input.latest_revision,
        input.collision_count,
    );
    let mut plan = UpdatePlan {
        status_changed: status::differs(sidecar_set.status.as_ref(), &status),
        status,
        stage: Stage::Upgrade,
        pod_changes: Vec::new(),
        not_upgradable: Vec::new(),
        condition_changes: Vec::new(),
        events: Vec::new(),
        expectations: Vec::new(),
        requeue_after_seconds: None,
    };

    if !expectations_met(sidecar_set, input.expectations, &matched, input.pods) {
        plan.stage = Stage::WaitForCache;
        plan.requeue_after_seconds = Some(1);
        return Ok(plan);
    }
    let strategy = sidecar_set.spec.update_strategy.clone().unwrap_or_default();
    if strategy.type_ == Some(SidecarSetUpdateStrategyType::NotUpdate) {
        plan.stage = Stage::NotUpdate;
        return Ok(plan);
    }
    if strategy.paused {
        plan.stage = Stage::Paused;
        return Ok(plan);
    }

    let resets: Vec<PodChange> = matched
        .iter()
        .filter(|pod| hot::ready_to_reset(sidecar_set, pod))
        .map(|pod| change::reset(sidecar_set, pod, input.now))
        .collect();
    if !resets.is_empty() {
        plan.stage = Stage::ResetHotUpgrade;
        plan.pod_changes = resets;
        return Ok(plan);
    }
    if plan.status.updated_pods >= plan.status.matched_pods {
        plan.stage = Stage::Finished;
        return Ok(plan);
    }

    let next = next_upgrade_pods(sidecar_set, &matched)?;
    for pod in &next.not_upgradable {
        plan.not_upgradable.push(PodKey::of(pod));
        if let Some(condition) = upgradable_condition(pod, sidecar_set, false, input.now) {
            plan.condition_changes.push(ConditionChange {
                pod: PodKey::of(pod),
                condition,
            });
        }
    }
    if !next.not_upgradable.is_empty() {
        plan.events.push(SidecarSetEvent {
            type_: "Normal",
            reason: EVENT_NOT_UPGRADABLE_PODS,
            message: format!(
                "SidecarSet in-place update detected {} not upgradable pod(s) in this round, will skip them.",
                next.not_upgradable.len()
            ),
        });
    }
    let hash = pods::sidecar_set_hash(sidecar_set).to_owned();
    for pod in next.upgrade {
        let upgrade = change::upgrade(sidecar_set, pod, input.latest_revision, input.now)?;
        plan.expectations.push(ExpectedHash {
            pod: upgrade.pod.clone(),
            hash: hash.clone(),
        });
        plan.pod_changes.push(upgrade);
    }
    Ok(plan)
}

/// Spec 02 §3 step 1: the pods the SidecarSet sees, in input order.
pub fn matching_pods<'a>(
    sidecar_set: &SidecarSet,
    pods: &[&'a Pod],
    namespace_labels: &BTreeMap<String, BTreeMap<String, String>>,
) -> Result<Vec<&'a Pod>, UpdateError> {
    let mut matched = Vec::new();
    for &pod in pods {
        if pods::is_matching(sidecar_set, pod, namespace_labels)? {
            matched.push(pod);
        }
    }
    Ok(matched)
}

/// Every remembered upgrade shows in the pods (a pod that is gone or no
/// longer matched needs no waiting).
fn expectations_met(
    sidecar_set: &SidecarSet,
    expectations: &[ExpectedHash],
    matched: &[&Pod],
    all: &[&Pod],
) -> bool {
    let name = crate::sidecarset::sidecar_set_name(sidecar_set);
    // Indexed once: a round may wait on hundreds of upgrades among
    // thousands of pods. (Inserted one by one: `collect` would compile a
    // sort of its own, src/ordered.rs.)
    let mut by_key: BTreeMap<(&str, &str), &Pod> = BTreeMap::new();
    for &pod in all {
        by_key.entry(borrowed_key(pod)).or_insert(pod);
    }
    expectations.iter().all(|expected| {
        let key = (expected.pod.namespace.as_str(), expected.pod.name.as_str());
        let Some(&pod) = by_key.get(&key) else {
            return true;
        };
        if !matched.iter().any(|m| std::ptr::eq(*m, pod)) {
            return true;
        }
        pods::recorded_hash(pod, crate::sidecarset::HASH_ANNOTATION, name) == expected.hash
    })
}
