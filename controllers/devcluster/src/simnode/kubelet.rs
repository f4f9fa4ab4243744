//! What kubelet would report for a pod, as a pure function of the pod, its
//! last status and the time: containers start (unless their configuration
//! refers to a missing ConfigMap key), turn ready, restart alone when their
//! image changes in place or when they were stopped (new containerID,
//! restartCount + 1), and the Ready condition honours readiness gates.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use sha2::{Digest, Sha256};

/// Fault knob: containers turn ready this many seconds after they start.
pub const READY_AFTER_SECONDS: &str = "devcluster.kruise.io/ready-after-seconds";
/// Fault knob: a comma-separated list of containers that keep crashing.
pub const CRASH_LOOP: &str = "devcluster.kruise.io/crash-loop";

const CRASH_BACKOFF: Duration = Duration::from_secs(5);
/// Conditions this kubelet owns; every other condition (readiness gates,
/// a controller's InPlaceUpdateReady) is left as it is.
pub const OWN_CONDITIONS: [&str; 4] = [
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
];

/// What the agent found out about the world for this pod.
#[derive(Debug, Clone)]
pub struct Observation {
    pub now: Timestamp,
    pub host_ip: String,
    /// Containers that cannot be configured yet, with kubelet's message
    /// (an env var from a ConfigMap key that does not exist).
    pub blocked: BTreeMap<String, String>,
}

/// The status to write and when to look again (a container turning ready
/// later, a crash loop, a blocked container).
#[derive(Debug, Clone, PartialEq)]
pub struct Next {
    pub status: PodStatus,
    pub recheck_after: Option<Duration>,
}

/// A ConfigMap key a container's environment needs before it can start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigNeed {
    pub container: String,
    pub config_map: String,
    /// `None`: the whole ConfigMap (`envFrom`).
    pub key: Option<String>,
}

/// The non-optional ConfigMap references of every container (init ones
/// included), in container order.
pub fn config_needs(spec: &PodSpec) -> Vec<ConfigNeed> {
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers);
    let mut needs = Vec::new();
    for container in containers {
        for env in container.env.iter().flatten() {
            let Some(reference) = env
                .value_from
                .as_ref()
                .and_then(|v| v.config_map_key_ref.as_ref())
            else {
                continue;
            };
            if reference.optional != Some(true) {
                needs.push(ConfigNeed {
                    container: container.name.clone(),
                    config_map: reference.name.clone(),
                    key: Some(reference.key.clone()),
                });
            }
        }
        for source in container.env_from.iter().flatten() {
            if let Some(reference) = &source.config_map_ref
                && reference.optional != Some(true)
            {
                needs.push(ConfigNeed {
                    container: container.name.clone(),
                    config_map: reference.name.clone(),
                    key: None,
                });
            }
        }
    }
    needs
}

pub fn next_status(pod: &Pod, observation: &Observation) -> Next {
    let empty = PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&empty);
    let previous = pod.status.clone().unwrap_or_default();
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let knobs = Knobs::from(&annotations);
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let now = observation.now;
    let mut recheck: Option<Duration> = None;
    let mut sooner = |d: Duration| recheck = Some(recheck.map_or(d, |r| r.min(d)));

    let mut run = |container: &Container, previous: Option<&ContainerStatus>| {
        let (status, again) = container_status(&uid, container, previous, observation, &knobs);
        if let Some(d) = again {
            sooner(d);
        }
        status
    };
    let (mut init_statuses, mut init_done) = (Vec::new(), true);
    for container in spec.init_containers.iter().flatten() {
        let previous = find(previous.init_container_statuses.as_ref(), &container.name);
        let status = if container.restart_policy.as_deref() == Some("Always") {
            let status = run(container, previous);
            init_done &= status.started == Some(true);
            status
        } else if !init_done || observation.blocked.contains_key(&container.name) {
            init_done = false;
            run(container, previous)
        } else {
            completed(&uid, container, previous, now)
        };
        init_statuses.push(status);
    }
    let statuses: Vec<ContainerStatus> = if init_done {
        spec.containers
            .iter()
            .map(|c| run(c, find(previous.container_statuses.as_ref(), &c.name)))
            .collect()
    } else {
        spec.containers
            .iter()
            .map(|c| waiting(c, "PodInitializing", None))
            .collect()
    };

    let all_ready = statuses.iter().all(|s| s.ready) && !statuses.is_empty();
    let all_started = statuses.iter().all(|s| s.started == Some(true));
    let gates_open = spec.readiness_gates.iter().flatten().all(|gate| {
        previous
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == gate.condition_type && c.status == "True")
    });
    let old_conditions = previous.conditions.clone().unwrap_or_default();
    let mut conditions: Vec<PodCondition> = old_conditions
        .iter()
        .filter(|c| !OWN_CONDITIONS.contains(&c.type_.as_str()))
        .cloned()
        .collect();
    for (kind, on) in [
        ("PodReadyToStartContainers", true),
        ("Initialized", init_done),
        ("ContainersReady", all_ready),
        ("Ready", all_ready && gates_open),
    ] {
        conditions.push(condition(&old_conditions, kind, on, now));
    }

    let pod_ip = previous.pod_ip.clone().unwrap_or_else(|| pod_ip(&uid));
    let status = PodStatus {
        phase: Some(if all_started { "Running" } else { "Pending" }.to_owned()),
        conditions: Some(conditions),
        host_ip: Some(observation.host_ip.clone()),
        host_ips: Some(vec![HostIP {
            ip: observation.host_ip.clone(),
        }]),
        pod_ip: Some(pod_ip.clone()),
        pod_ips: Some(vec![PodIP { ip: pod_ip }]),
        start_time: previous.start_time.clone().or(Some(Time(now))),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        container_statuses: Some(statuses),
        qos_class: previous.qos_class.clone().or(Some("BestEffort".to_owned())),
        ..previous
    };
    Next {
        status,
        recheck_after: recheck,
    }
}

struct Knobs {
    ready_after: Option<SignedDuration>,
    crash_loop: Vec<String>,
}

impl Knobs {
    fn from(annotations: &BTreeMap<String, String>) -> Self {
        Self {
            ready_after: annotations
                .get(READY_AFTER_SECONDS)
                .and_then(|v| v.trim().parse::<i64>().ok())
                .map(SignedDuration::from_secs),
            crash_loop: annotations
                .get(CRASH_LOOP)
                .map(|v| v.split(',').map(|s| s.trim().to_owned()).collect())
                .unwrap_or_default(),
        }
    }
}

fn container_status(
    uid: &str,
    container: &Container,
    previous: Option<&ContainerStatus>,
    observation: &Observation,
    knobs: &Knobs,
) -> (ContainerStatus, Option<Duration>) {
    let now = observation.now;
    let image = container.image.clone().unwrap_or_default();
    let running_since = previous.and_then(|p| {
        let since = p.state.as_ref()?.running.as_ref()?.started_at.clone()?;
        (p.image == image).then_some((since, p))
    });
    // kubelet resolves a container's configuration only to create it: a
    // running container keeps running when its ConfigMap key goes away.
    if running_since.is_none()
        && let Some(message) = observation.blocked.get(&container.name)
    {
        // kubelet keeps what ran before (an in-place restart that cannot
        // be configured stays down) and retries.
        let restarts = previous.map_or(0, |p| p.restart_count);
        let mut status = waiting(
            container,
            "CreateContainerConfigError",
            Some(message.clone()),
        );
        status.restart_count = restarts;
        return (status, Some(Duration::from_secs(2)));
    }
    if knobs.crash_loop.contains(&container.name) {
        return crash_looping(uid, container, previous, now);
    }
    let (started_at, restarts, last_state) = match (running_since, previous) {
        (Some((since, p)), _) => (since, p.restart_count, p.last_state.clone()),
        // Running with another image: the image was changed in place, so
        // kubelet kills this container alone and starts the new image.
        (None, Some(p)) if p.state.as_ref().is_some_and(|s| s.running.is_some()) => (
            Time(now),
            p.restart_count + 1,
            Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 0,
                    reason: Some("Completed".to_owned()),
                    container_id: p.container_id.clone(),
                    finished_at: Some(Time(now)),
                    ..ContainerStateTerminated::default()
                }),
                ..ContainerState::default()
            }),
        ),
        // Stopped (by the node agent, for a ContainerRecreateRequest):
        // kubelet starts a new instance, which counts as a restart.
        (None, Some(p)) if p.state.as_ref().is_some_and(|s| s.terminated.is_some()) => {
            (Time(now), p.restart_count + 1, p.state.clone())
        }
        (None, previous) => (
            Time(now),
            previous.map_or(0, |p| p.restart_count),
            previous.and_then(|p| p.last_state.clone()),
        ),
    };
    let (ready, again) = match knobs.ready_after {
        Some(delay) => {
            let ready_at = started_at.0.saturating_add(delay).unwrap_or(started_at.0);
            let left = ready_at.duration_since(now);
            if left.is_positive() {
                (false, Some(left.unsigned_abs()))
            } else {
                (true, None)
            }
        }
        None => (true, None),
    };
    let status = ContainerStatus {
        name: container.name.clone(),
        image: image.clone(),
        image_id: image_id(&image),
        container_id: Some(container_id(uid, &container.name, restarts, &image)),
        ready,
        started: Some(true),
        restart_count: restarts,
        state: Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(started_at),
            }),
            ..ContainerState::default()
        }),
        last_state,
        ..ContainerStatus::default()
    };
    (status, again)
}

/// A container that keeps crashing: never ready, one more restart per
/// back-off period.
fn crash_looping(
    uid: &str,
    container: &Container,
    previous: Option<&ContainerStatus>,
    now: Timestamp,
) -> (ContainerStatus, Option<Duration>) {
    let image = container.image.clone().unwrap_or_default();
    let restart_count = previous.map_or(0, |p| p.restart_count);
    let last_crash = previous
        .and_then(|p| p.last_state.as_ref())
        .and_then(|s| s.terminated.as_ref())
        .and_then(|t| t.finished_at.clone());
    let due = last_crash
        .as_ref()
        .is_none_or(|t| elapsed(t.0, now) >= CRASH_BACKOFF);
    let restarts = if due {
        restart_count + 1
    } else {
        restart_count
    };
    let finished = if due {
        Time(now)
    } else {
        last_crash.unwrap_or(Time(now))
    };
    let mut status = waiting(container, "CrashLoopBackOff", None);
    status.restart_count = restarts;
    status.image_id = image_id(&image);
    status.container_id = Some(container_id(uid, &container.name, restarts, &image));
    status.last_state = Some(ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: 1,
            reason: Some("Error".to_owned()),
            finished_at: Some(finished),
            ..ContainerStateTerminated::default()
        }),
        ..ContainerState::default()
    });
    (status, Some(CRASH_BACKOFF))
}

fn completed(
    uid: &str,
    container: &Container,
    previous: Option<&ContainerStatus>,
    now: Timestamp,
) -> ContainerStatus {
    if let Some(done) =
        previous.filter(|p| p.state.as_ref().is_some_and(|s| s.terminated.is_some()))
    {
        return done.clone();
    }
    let image = container.image.clone().unwrap_or_default();
    ContainerStatus {
        name: container.name.clone(),
        image: image.clone(),
        image_id: image_id(&image),
        container_id: Some(container_id(uid, &container.name, 0, &image)),
        ready: true,
        started: Some(false),
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 0,
                reason: Some("Completed".to_owned()),
                started_at: Some(Time(now)),
                finished_at: Some(Time(now)),
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

fn waiting(container: &Container, reason: &str, message: Option<String>) -> ContainerStatus {
    ContainerStatus {
        name: container.name.clone(),
        image: container.image.clone().unwrap_or_default(),
        started: Some(false),
        state: Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.to_owned()),
                message,
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

fn condition(old: &[PodCondition], kind: &str, on: bool, now: Timestamp) -> PodCondition {
    let status = if on { "True" } else { "False" };
    let since = old
        .iter()
        .find(|c| c.type_ == kind && c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    PodCondition {
        type_: kind.to_owned(),
        status: status.to_owned(),
        last_transition_time: Some(since),
        ..PodCondition::default()
    }
}

fn find<'a>(statuses: Option<&'a Vec<ContainerStatus>>, name: &str) -> Option<&'a ContainerStatus> {
    statuses.and_then(|all| all.iter().find(|s| s.name == name))
}

fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    now.duration_since(since).unsigned_abs()
}

fn hex_digest(parts: &[&str]) -> String {
    let mut digest = Sha256::new();
    for part in parts {
        digest.update(part.as_bytes());
        digest.update([0]);
    }
    crate::hex(&digest.finalize())
}

/// A digest per image reference: a changed image always gets a new imageID.
fn image_id(image: &str) -> String {
    let repository = image.split_once('@').map_or(image, |(r, _)| r);
    let repository = match repository.rsplit_once(':') {
        Some((r, tag)) if !tag.contains('/') => r,
        _ => repository,
    };
    format!("{repository}@sha256:{}", hex_digest(&[image]))
}

/// A new id for every (re)start of a container.
fn container_id(uid: &str, name: &str, restarts: i32, image: &str) -> String {
    format!(
        "containerd://{}",
        hex_digest(&[uid, name, &restarts.to_string(), image])
    )
}

/// A stable address per pod in 10.244.0.0/16.
fn pod_ip(uid: &str) -> String {
    let digest = Sha256::digest(uid.as_bytes());
    format!("10.244.{}.{}", digest[0], digest[1] % 250 + 2)
}
