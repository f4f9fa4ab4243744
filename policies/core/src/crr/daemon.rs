//! The node side of a ContainerRecreateRequest (kruise-daemon's job in
//! OpenKruise): pick one request per pod, work out each container's
//! recreate state from what the container runtime reports, and say which
//! container to kill next.

use k8s_openapi::jiff::Timestamp;

/// A container as the node's runtime reports it: one entry per instance,
/// so a container that was restarted appears once per attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeContainer {
    /// Prefixed with the runtime, as in a pod's status: `containerd://<id>`.
    pub id: String,
    /// The pod's container name (`io.kubernetes.container.name`).
    pub name: String,
    pub state: RuntimeState,
    /// Which instance this is: 0 first, kubelet's restartCount after that.
    pub restart_count: i32,
    /// When it started running, if it did.
    pub started_at: Option<Timestamp>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeState {
    Created,
    Running,
    Exited,
    Unknown,
}

use std::collections::BTreeMap;
use std::time::Duration;

use kruise_api::ContainerRecreateRequest;
use kruise_api::containerrecreaterequest::{
    ContainerRecreateRequestContainerRecreateState as ContainerState,
    ContainerRecreateRequestFailurePolicy as FailurePolicy, ContainerRecreateRequestPhase as Phase,
    ProbeHandler,
};

/// How often a request that waits on something outside the agent (the
/// manager's not-ready condition, a queued request) is looked at again,
/// even without an event.
pub const RECHECK: Duration = Duration::from_secs(2);
/// The container's grace period when neither the request nor the pod says.
pub const DEFAULT_GRACE_SECONDS: i64 = 30;
/// Extra wait after the not-ready grace, so the check lands after it.
const GRACE_MARGIN: Duration = Duration::from_millis(100);

/// Where the agent notes, before a forced recreation's stop, the container
/// instance it is about to stop ([`Kill::note`]). A forced recreation stops
/// whatever instance runs, so an agent that crashed between a stop and its
/// record (`isKilled`) would, on its return, stop the new instance too; the
/// note tells it that the instance it went for is gone, and the container
/// counts as killed.
pub const STOPPING_ANNOTATION: &str = "crr.kruise-wasm.io/stopping";

/// The note's value: the container and the instance.
#[derive(Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct StopNote {
    name: String,
    #[serde(rename = "containerID")]
    container_id: String,
}

/// The stop noted on `request`, if any (a note that does not read is none).
fn noted_stop(request: &ContainerRecreateRequest) -> Option<StopNote> {
    let text = request
        .metadata
        .annotations
        .as_ref()?
        .get(STOPPING_ANNOTATION)?;
    serde_json::from_str(text).ok()
}

/// Which of a pod's requests the agent works on now.
#[derive(Debug, PartialEq, Eq)]
pub struct Pick {
    /// Index of the request to work on.
    pub picked: usize,
    /// Requests never looked at before (no status), to be marked Pending:
    /// they wait behind `picked`.
    pub to_queue: Vec<usize>,
}

/// One request per pod at a time: a request already recreating goes on,
/// then queued ones, then new ones, oldest first. Finished and deleting
/// requests are skipped, so a request the manager completed (pod gone,
/// deadline) never blocks the ones behind it.
pub fn pick(requests: &[ContainerRecreateRequest]) -> Option<Pick> {
    let mut open: Vec<usize> = (0..requests.len())
        .filter(|&i| is_open(&requests[i]))
        .collect();
    crate::ordered::sort_by_key(&mut open, |&i| {
        let request = &requests[i];
        let weight = match request.status.as_ref().map(|s| s.phase) {
            Some(Phase::Recreating) => 0,
            Some(Phase::Pending) => 1,
            None => 2,
            Some(_) => 3,
        };
        let created = request.metadata.creation_timestamp.as_ref().map(|t| t.0);
        (weight, created, request.metadata.name.clone())
    });
    let (&picked, rest) = open.split_first()?;
    let to_queue = rest
        .iter()
        .copied()
        .filter(|&i| requests[i].status.is_none())
        .collect();
    Some(Pick { picked, to_queue })
}

/// Not finished and not being deleted.
pub fn is_open(request: &ContainerRecreateRequest) -> bool {
    let finished = request
        .status
        .as_ref()
        .is_some_and(|s| s.phase == Phase::Completed || s.completion_time.is_some());
    !finished && request.metadata.deletion_timestamp.is_none()
}

/// What the agent does next with the picked request.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Set `phase: Recreating` (the manager starts its snapshots and the
    /// not-ready grace on this).
    StartRecreating,
    /// Nothing to do before this much time has passed (or an event).
    Wait(Duration),
    /// Write these container states and look again.
    WriteStates(Vec<ContainerState>),
    /// Stop this container (running its preStop hook first); on success
    /// write `states`, in which it is already marked killed.
    Kill {
        kill: Box<Kill>,
        states: Vec<ContainerState>,
    },
    /// Finish the request with these states and, for an abnormal end, a
    /// message.
    Complete {
        states: Vec<ContainerState>,
        message: Option<String>,
    },
}

/// A container to stop, with what its stop needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Kill {
    /// Index in `spec.containers` (and in the states).
    pub index: usize,
    pub name: String,
    /// The runtime's current instance of it.
    pub container_id: String,
    pub pre_stop: Option<ProbeHandler>,
    /// Seconds from SIGTERM (or the start of the preStop hook) to SIGKILL.
    pub grace_seconds: i64,
    /// For a forced recreation, the value of [`STOPPING_ANNOTATION`] to
    /// write on the request before the stop.
    pub note: Option<String>,
}

/// What the agent knows when it plans: the request, its pod's containers
/// as the runtime reports them, and the time.
#[derive(Debug)]
pub struct Observed<'a> {
    pub request: &'a ContainerRecreateRequest,
    pub runtime: &'a [RuntimeContainer],
    pub now: Timestamp,
}

/// The next step for the picked request (OpenKruise's daemon sync: the
/// recreate states of every container, then at most one kill per pass).
pub fn plan(observed: &Observed) -> Step {
    let request = observed.request;
    let Some(status) = &request.status else {
        return Step::StartRecreating;
    };
    if status.phase != Phase::Recreating {
        return Step::StartRecreating;
    }
    if let Some(wait) = unready_grace_left(request, observed.now) {
        return Step::Wait(wait);
    }
    if let Err(message) = runtime_of(request) {
        return Step::Complete {
            states: status.container_recreate_states.clone(),
            message: Some(message),
        };
    }
    let current = current_states(observed);
    if current != status.container_recreate_states {
        return Step::WriteStates(current);
    }
    walk(observed, current)
}

/// The states after a failed kill: the container failed. With
/// `failurePolicy: Fail` the next pass completes the request; with
/// `Ignore` it goes on with the next container.
pub fn kill_failed(
    mut states: Vec<ContainerState>,
    index: usize,
    error: &str,
) -> Vec<ContainerState> {
    if let Some(state) = states.get_mut(index) {
        state.phase = Phase::Failed;
        state.is_killed = false;
        state.message = Some(format!("kill container error: {error}"));
    }
    states
}

/// Time left of the not-ready grace: it starts when the manager has held
/// the pod not-ready (the `unready-acquired` annotation); until then the
/// agent waits for it.
fn unready_grace_left(request: &ContainerRecreateRequest, now: Timestamp) -> Option<Duration> {
    let grace = strategy(request).and_then(|s| s.unready_grace_period_seconds)?;
    let Some(since) = super::unready_acquired_at(request) else {
        return Some(RECHECK);
    };
    let elapsed = now.duration_since(since).as_secs();
    let left = grace.saturating_sub(elapsed);
    (left > 0).then(|| Duration::from_secs(left.unsigned_abs()) + GRACE_MARGIN)
}

/// The runtime every container ID names (`containerd` in
/// `containerd://…`): all must agree, since one runtime kills them.
fn runtime_of(request: &ContainerRecreateRequest) -> Result<String, String> {
    let mut runtimes = request.spec.containers.iter().map(|c| {
        let id = c
            .status_context
            .as_ref()
            .map_or("", |s| s.container_id.as_str());
        match id.split_once("://") {
            Some((runtime, rest)) if !runtime.is_empty() && !rest.is_empty() => {
                Ok(runtime.to_owned())
            }
            _ => Err(format!(
                "container {} has no valid containerID in its statusContext: {id:?}",
                c.name
            )),
        }
    });
    let first = runtimes
        .next()
        .unwrap_or_else(|| Err("the request names no containers".to_owned()))?;
    for runtime in runtimes {
        let runtime = runtime?;
        if runtime != first {
            return Err(format!(
                "the containers run on different runtimes: {first} and {runtime}"
            ));
        }
    }
    Ok(first)
}

/// Each container's state now, in spec order (OpenKruise's
/// `getCurrentCRRContainersRecreateStates`).
fn current_states(observed: &Observed) -> Vec<ContainerState> {
    let request = observed.request;
    let previous: BTreeMap<&str, &ContainerState> = request
        .status
        .iter()
        .flat_map(|s| &s.container_recreate_states)
        .map(|s| (s.name.as_str(), s))
        .collect();
    let latest = latest_instances(observed.runtime);
    let snapshot = super::snapshot(request);
    let force = strategy(request).and_then(|s| s.force_recreate) == Some(true);
    let noted = noted_stop(request);
    let min_started = i64::from(strategy(request).map_or(0, |s| s.min_started_seconds));
    request
        .spec
        .containers
        .iter()
        .map(|container| {
            let name = container.name.as_str();
            let before = previous.get(name).copied();
            // Recorded, or noted before a stop whose instance is gone since.
            let stopped_unrecorded = noted.as_ref().is_some_and(|note| {
                note.name == name && latest.get(name).is_some_and(|i| i.id != note.container_id)
            });
            let was_killed = before.is_some_and(|s| s.is_killed) || stopped_unrecorded;
            let state = |phase: Phase, message: Option<&str>| ContainerState {
                name: name.to_owned(),
                phase,
                message: message.map(str::to_owned),
                is_killed: was_killed,
            };
            if let Some(done) =
                before.filter(|s| matches!(s.phase, Phase::Succeeded | Phase::Failed))
            {
                return done.clone();
            }
            let Some(instance) = latest.get(name) else {
                return state(Phase::Pending, Some("not found container on Node"));
            };
            if instance.state == RuntimeState::Exited {
                // kubelet starts it again.
                return state(Phase::Recreating, None);
            }
            if force && !was_killed {
                return state(Phase::Pending, None);
            }
            let context = container.status_context.as_ref();
            let restarted = context.is_none_or(|c| {
                instance.id != c.container_id || instance.restart_count > c.restart_count
            });
            if !restarted {
                return state(Phase::Pending, None);
            }
            let seen_ready = snapshot.iter().any(|s| {
                s.name == name && s.ready && s.container_id.as_deref() == Some(&instance.id)
            });
            let running_long_enough = instance.state == RuntimeState::Running
                && instance
                    .started_at
                    .is_some_and(|t| observed.now.duration_since(t).as_secs() >= min_started);
            if seen_ready && running_long_enough {
                state(Phase::Succeeded, None)
            } else {
                state(Phase::Recreating, None)
            }
        })
        .collect()
}

/// The newest instance of each container: the highest restart count, the
/// later start on a tie.
fn latest_instances(runtime: &[RuntimeContainer]) -> BTreeMap<&str, &RuntimeContainer> {
    let mut latest: BTreeMap<&str, &RuntimeContainer> = BTreeMap::new();
    for container in runtime {
        let newer = latest.get(container.name.as_str()).is_none_or(|current| {
            (container.restart_count, container.started_at)
                > (current.restart_count, current.started_at)
        });
        if newer {
            latest.insert(&container.name, container);
        }
    }
    latest
}

/// Walks the states in order: finished ones count, a recreating one is
/// marked killed (and, ordered, holds the rest back), the first pending
/// one is killed if it runs (if the node has none, the rest wait). Completes the request when every container
/// finished, or at once on a failure under `failurePolicy: Fail`.
fn walk(observed: &Observed, mut states: Vec<ContainerState>) -> Step {
    let request = observed.request;
    let strategy = strategy(request);
    let ordered = strategy.and_then(|s| s.ordered_recreate) == Some(true);
    let force = strategy.and_then(|s| s.force_recreate) == Some(true);
    let fail_fast = strategy.and_then(|s| s.failure_policy) != Some(FailurePolicy::Ignore);
    let latest = latest_instances(observed.runtime);
    let before = states.clone();
    let mut finished = 0;
    for (index, state) in states.iter_mut().enumerate() {
        match state.phase {
            Phase::Failed if fail_fast => {
                return Step::Complete {
                    states: before,
                    message: None,
                };
            }
            Phase::Succeeded | Phase::Failed => finished += 1,
            Phase::Recreating => {
                state.is_killed = true;
                if ordered {
                    break;
                }
            }
            Phase::Pending | Phase::Completed => {
                // Not on the node (yet): nothing to kill, and, as in
                // OpenKruise's daemon, nothing after it either; look again
                // later.
                let Some(instance) = latest.get(state.name.as_str()) else {
                    break;
                };
                state.is_killed = true;
                state.phase = Phase::Recreating;
                let kill = Kill {
                    index,
                    name: state.name.clone(),
                    container_id: instance.id.clone(),
                    pre_stop: request
                        .spec
                        .containers
                        .get(index)
                        .and_then(|c| c.pre_stop.clone()),
                    grace_seconds: grace_seconds(request),
                    note: force.then(|| stop_note(&state.name, &instance.id)),
                };
                return Step::Kill {
                    kill: Box::new(kill),
                    states,
                };
            }
        }
    }
    if finished == states.len() {
        return Step::Complete {
            states,
            message: None,
        };
    }
    if states != before {
        return Step::WriteStates(states);
    }
    Step::Wait(RECHECK)
}

fn stop_note(name: &str, container_id: &str) -> String {
    let note = StopNote {
        name: name.to_owned(),
        container_id: container_id.to_owned(),
    };
    serde_json::to_string(&note).unwrap_or_default()
}

/// The stop's grace period: the request's (the webhook copies the pod's
/// into it), else kubelet's default.
fn grace_seconds(request: &ContainerRecreateRequest) -> i64 {
    strategy(request)
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(DEFAULT_GRACE_SECONDS)
        .max(0)
}

fn strategy(
    request: &ContainerRecreateRequest,
) -> Option<&kruise_api::containerrecreaterequest::ContainerRecreateRequestStrategy> {
    request.spec.strategy.as_ref()
}
