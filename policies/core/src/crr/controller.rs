//! The manager side of a ContainerRecreateRequest (OpenKruise's CRR
//! controller): finish a request whose pod has gone, whose daemon never
//! answered or whose deadline passed; while it recreates, keep a snapshot
//! of the pod's new containers (the agent's proof that they came up) and
//! hold the pod not-ready for the grace period; once finished, let go of
//! the pod, drop the `active` label and delete it after its TTL.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kruise_api::ContainerRecreateRequest;
use kruise_api::containerrecreaterequest::{
    ACTIVE_LABEL, ContainerRecreateRequestPhase as Phase, ContainerStatusSnapshot, POD_UID_LABEL,
    UNREADY_ACQUIRED_KEY,
};

use crate::pod_readiness::{self, Holder};

/// How long a new request may wait for the node's agent to pick it up.
pub const DAEMON_SILENCE: Duration = Duration::from_mins(1);
/// How often the snapshot is refreshed while containers are recreated.
pub const SNAPSHOT_EVERY: Duration = Duration::from_secs(3);

pub const POD_GONE: &str = "pod has gone";
pub const DAEMON_SILENT: &str = "daemon has not responded for a long time";
pub const DEADLINE_EXCEEDED: &str = "recreating has exceeded the activeDeadlineSeconds";
/// Who holds the pod not-ready, in its `KruisePodReady` condition.
pub const USER_AGENT: &str = "ContainerRecreateRequest";

/// One write the controller makes; after it the request and its pod are
/// read again and planned anew.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Finish the request (phase Completed, completionTime now).
    Complete {
        message: String,
    },
    /// Write the pod's `KruisePodReady` condition.
    WritePodCondition(PodCondition),
    AddFinalizer,
    RemoveFinalizer,
    RemoveActiveLabel,
    /// Write the snapshot annotation.
    WriteSnapshot(Vec<ContainerStatusSnapshot>),
    /// Write the `unready-acquired` annotation with this time: the
    /// not-ready grace starts.
    StartGrace(Timestamp),
    /// The TTL after completion has passed.
    Delete,
    /// Nothing to write; look again after this long, or on a change.
    Wait(Option<Duration>),
}

/// The next write for `request`, whose pod is `pod` (`None`: not found).
pub fn plan(request: &ContainerRecreateRequest, pod: Option<&Pod>, now: Timestamp) -> Step {
    let holder = holder(request);
    let finished = request
        .status
        .as_ref()
        .and_then(|s| s.completion_time.as_ref());
    if request.metadata.deletion_timestamp.is_some() || finished.is_some() {
        return after_finish(request, pod, &holder, now);
    }
    if !pod.is_some_and(|p| is_target(request, p)) {
        return complete(POD_GONE);
    }
    let created = created(request, now);
    let phase = request.status.as_ref().map(|s| s.phase);
    if phase.is_none() {
        let left = remaining(created, DAEMON_SILENCE, now);
        return if left.is_zero() {
            complete(DAEMON_SILENT)
        } else {
            Step::Wait(Some(left))
        };
    }
    let deadline = request
        .spec
        .active_deadline_seconds
        .map(|s| remaining(created, Duration::from_secs(s.max(0).unsigned_abs()), now));
    if deadline.is_some_and(|left| left.is_zero()) {
        return complete(DEADLINE_EXCEEDED);
    }
    let wait = |every: Option<Duration>| {
        let soonest = [every, deadline].into_iter().flatten().min();
        Step::Wait(soonest)
    };
    if phase != Some(Phase::Recreating) {
        return wait(None);
    }
    let Some(pod) = pod else {
        return complete(POD_GONE);
    };
    if let Some(snapshot) = new_snapshot(request, pod) {
        return Step::WriteSnapshot(snapshot);
    }
    if let Some(step) = hold_not_ready(request, pod, &holder, now) {
        return step;
    }
    wait(Some(SNAPSHOT_EVERY))
}

/// A finished (or deleted) request lets go of its pod, then of its
/// `active` label, and is deleted once its TTL has passed.
fn after_finish(
    request: &ContainerRecreateRequest,
    pod: Option<&Pod>,
    holder: &Holder,
    now: Timestamp,
) -> Step {
    if has_finalizer(request) {
        let release = pod
            .filter(|p| is_target(request, p))
            .and_then(|p| pod_readiness::release(p, holder, now));
        return release.map_or(Step::RemoveFinalizer, Step::WritePodCondition);
    }
    if request.metadata.deletion_timestamp.is_some() {
        return Step::Wait(None);
    }
    if has_active_label(request) {
        return Step::RemoveActiveLabel;
    }
    let ttl = request.spec.ttl_seconds_after_finished;
    let completed = request
        .status
        .as_ref()
        .and_then(|s| s.completion_time.as_ref())
        .map(|t| t.0);
    match (ttl, completed) {
        (Some(ttl), Some(completed)) => {
            let left = remaining(
                completed,
                Duration::from_secs(u64::from(ttl.max(0).unsigned_abs())),
                now,
            );
            if left.is_zero() {
                Step::Delete
            } else {
                Step::Wait(Some(left))
            }
        }
        _ => Step::Wait(None),
    }
}

/// The pod the request was made for: same UID, not being deleted. A pod
/// of the same name made since (a StatefulSet's, say) is not it.
pub fn is_target(request: &ContainerRecreateRequest, pod: &Pod) -> bool {
    let wanted = request
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(POD_UID_LABEL));
    pod.metadata.deletion_timestamp.is_none() && pod.metadata.uid.as_ref() == wanted
}

/// The snapshot to write, if it changed: every requested container that
/// runs an instance started since the request was made. An empty snapshot
/// does not replace a full one (a container between its old instance's
/// exit and its new one's start).
fn new_snapshot(
    request: &ContainerRecreateRequest,
    pod: &Pod,
) -> Option<Vec<ContainerStatusSnapshot>> {
    let created = request.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref());
    let snapshot: Vec<ContainerStatusSnapshot> = request
        .spec
        .containers
        .iter()
        .filter_map(|c| statuses?.iter().find(|s| s.name == c.name))
        .filter(|s| {
            let started = s
                .state
                .as_ref()
                .and_then(|st| st.running.as_ref())
                .and_then(|r| r.started_at.as_ref())
                .map(|t| t.0);
            // Kubernetes times are whole seconds: an instance started in
            // the request's creation second counts as new.
            started.is_some_and(|t| created.is_none_or(|c| t.as_second() >= c.as_second()))
        })
        .map(|s| ContainerStatusSnapshot {
            name: s.name.clone(),
            ready: s.ready,
            restart_count: s.restart_count,
            container_id: s.container_id.clone(),
        })
        .collect();
    let current = super::snapshot(request);
    let keeps_last = snapshot.is_empty() && !current.is_empty();
    let changed = !keeps_last && snapshot != current;
    changed.then_some(snapshot)
}

/// With `unreadyGracePeriodSeconds`: hold the pod not-ready (only a pod
/// with the `KruisePodReady` gate can be; the finalizer makes sure the
/// hold is released even if the request is deleted), then start the grace.
fn hold_not_ready(
    request: &ContainerRecreateRequest,
    pod: &Pod,
    holder: &Holder,
    now: Timestamp,
) -> Option<Step> {
    request
        .spec
        .strategy
        .as_ref()
        .and_then(|s| s.unready_grace_period_seconds)?;
    if pod_readiness::has_gate(pod) {
        if !has_finalizer(request) {
            return Some(Step::AddFinalizer);
        }
        if let Some(condition) = pod_readiness::hold(pod, holder, now) {
            return Some(Step::WritePodCondition(condition));
        }
    }
    // A pod without the gate stays ready (as in OpenKruise); the grace
    // still has to pass before the containers are stopped.
    let started = super::unready_acquired_at(request).is_some();
    (!started).then_some(Step::StartGrace(now))
}

/// This request, as a holder of its pod's not-ready condition.
pub fn holder(request: &ContainerRecreateRequest) -> Holder {
    Holder {
        user_agent: USER_AGENT.to_owned(),
        key: format!(
            "{}/{}",
            request.metadata.namespace.as_deref().unwrap_or_default(),
            request.metadata.name.as_deref().unwrap_or_default()
        ),
    }
}

pub fn has_finalizer(request: &ContainerRecreateRequest) -> bool {
    request
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == UNREADY_ACQUIRED_KEY)
}

fn has_active_label(request: &ContainerRecreateRequest) -> bool {
    request
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(ACTIVE_LABEL))
}

fn complete(message: &str) -> Step {
    Step::Complete {
        message: message.to_owned(),
    }
}

fn created(request: &ContainerRecreateRequest, now: Timestamp) -> Timestamp {
    request
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(now, |t| t.0)
}

/// Time left until `since + span`; zero once it has passed.
fn remaining(since: Timestamp, span: Duration, now: Timestamp) -> Duration {
    let span = SignedDuration::try_from(span).unwrap_or(SignedDuration::MAX);
    let due = since.saturating_add(span).unwrap_or(Timestamp::MAX);
    due.duration_since(now).try_into().unwrap_or(Duration::ZERO)
}
