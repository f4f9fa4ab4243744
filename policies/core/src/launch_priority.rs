//! Container launch priority (spec 06): the pod-create mutation that gates
//! each container on a key of the `<pod>-barrier` ConfigMap, and the
//! controller's decision of which key to release next.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapKeySelector, Container, EnvVar, EnvVarSource, Pod,
};

use crate::cloneset::condition;

pub const PRIORITY_ANNOTATION: &str = "apps.kruise.io/container-launch-priority";
pub const ORDERED: &str = "Ordered";
pub const COMPLETED_ANNOTATION: &str = "apps.kruise.io/container-launch-priority-completed";
pub const PRIORITY_ENV: &str = "KRUISE_CONTAINER_PRIORITY";
pub const BARRIER_ENV: &str = "KRUISE_CONTAINER_BARRIER";

/// Kubernetes' limit on a generated name's random-free prefix (63 − 5).
const MAX_GENERATE_NAME_PREFIX: usize = 58;
/// The characters Kubernetes draws generated name suffixes from.
pub const NAME_SUFFIX_ALPHABET: &str = "bcdfghjklmnpqrstvwxz2456789";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LaunchPriorityError {
    #[error("container {container}: {PRIORITY_ENV}={value:?} is not an integer")]
    InvalidPriority { container: String, value: String },
    #[error("the pod has neither metadata.name nor metadata.generateName")]
    Unnamed,
    #[error("name suffix {0:?} must be 5 characters of {NAME_SUFFIX_ALPHABET}")]
    InvalidSuffix(String),
    /// The caller had no randomness to draw a suffix from (a host without
    /// WASI `random_get`), and the pod has only `generateName`.
    #[error("cannot name the pod from metadata.generateName: no random name suffix was drawn")]
    NoSuffix,
}

/// The ConfigMap key that releases containers of a priority.
pub fn barrier_key(priority: i64) -> String {
    format!("p_{priority}")
}

/// The priority a barrier key stands for.
pub fn priority_of_key(key: &str) -> Option<i64> {
    key.strip_prefix("p_")?.parse().ok()
}

pub fn barrier_config_map_name(pod_name: &str) -> String {
    format!("{pod_name}-barrier")
}

/// Each container's priority, or `None` when the pod needs no ordering: one
/// container, no priorities, or all of them equal. `Ordered` ranks by
/// position and ignores the env.
pub fn container_priorities(pod: &Pod) -> Result<Option<Vec<i64>>, LaunchPriorityError> {
    let containers = pod
        .spec
        .as_ref()
        .map_or(&[][..], |s| s.containers.as_slice());
    if containers.len() <= 1 {
        return Ok(None);
    }
    let ordered = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PRIORITY_ANNOTATION))
        .is_some_and(|v| v == ORDERED);
    if ordered {
        return Ok(Some((0_i64..).map(|i| -i).take(containers.len()).collect()));
    }
    let mut priorities = Vec::with_capacity(containers.len());
    for container in containers {
        // The last definition of the env wins, as it does for the container.
        let value = container
            .env
            .iter()
            .flatten()
            .rev()
            .find(|e| e.name == PRIORITY_ENV)
            .and_then(|e| e.value.as_deref());
        let priority = match value {
            None => 0,
            Some(text) => {
                text.trim()
                    .parse()
                    .map_err(|_| LaunchPriorityError::InvalidPriority {
                        container: container.name.clone(),
                        value: text.to_owned(),
                    })?
            }
        };
        priorities.push(priority);
    }
    let all_equal = priorities.windows(2).all(|pair| pair[0] == pair[1]);
    Ok(if all_equal { None } else { Some(priorities) })
}

/// The pod-create mutation: every container waits for its priority's key in
/// the barrier ConfigMap. A pod named only by `generateName` is named now,
/// with `name_suffix` (5 characters of [`NAME_SUFFIX_ALPHABET`], drawn by
/// the caller; empty when it had no randomness, which refuses such a pod),
/// because the ConfigMap is named after the pod.
///
/// Returns `None` when the pod needs no change, including a pod whose
/// containers already carry the barrier (a second pass changes nothing).
pub fn apply(pod: &Pod, name_suffix: &str) -> Result<Option<Pod>, LaunchPriorityError> {
    let Some(priorities) = container_priorities(pod)? else {
        return Ok(None);
    };
    let containers = pod
        .spec
        .as_ref()
        .map_or(&[][..], |s| s.containers.as_slice());
    let already_gated = containers
        .iter()
        .any(|c| c.env.iter().flatten().any(|e| e.name == BARRIER_ENV));
    if already_gated {
        return Ok(None);
    }
    let mut pod = pod.clone();
    let pod_name = match (&pod.metadata.name, &pod.metadata.generate_name) {
        (Some(name), _) if !name.is_empty() => name.clone(),
        (_, Some(prefix)) if !prefix.is_empty() => {
            let name = generated_name(prefix, name_suffix)?;
            pod.metadata.name = Some(name.clone());
            name
        }
        _ => return Err(LaunchPriorityError::Unnamed),
    };
    let config_map = barrier_config_map_name(&pod_name);
    let spec = pod.spec.get_or_insert_with(Default::default);
    for (container, priority) in spec.containers.iter_mut().zip(priorities) {
        container.env.get_or_insert_with(Vec::new).push(EnvVar {
            name: BARRIER_ENV.to_owned(),
            value: None,
            value_from: Some(EnvVarSource {
                config_map_key_ref: Some(ConfigMapKeySelector {
                    name: config_map.clone(),
                    key: barrier_key(priority),
                    optional: None,
                }),
                ..Default::default()
            }),
        });
    }
    Ok(Some(pod))
}

fn generated_name(prefix: &str, suffix: &str) -> Result<String, LaunchPriorityError> {
    if suffix.is_empty() {
        return Err(LaunchPriorityError::NoSuffix);
    }
    let valid_suffix =
        suffix.chars().count() == 5 && suffix.chars().all(|c| NAME_SUFFIX_ALPHABET.contains(c));
    if !valid_suffix {
        return Err(LaunchPriorityError::InvalidSuffix(suffix.to_owned()));
    }
    let prefix: String = prefix.chars().take(MAX_GENERATE_NAME_PREFIX).collect();
    Ok(format!("{prefix}{suffix}"))
}

/// The priorities (ascending, with repeats) of gated containers not yet
/// ready: what the barrier still holds back.
pub fn pending_priorities(pod: &Pod) -> Vec<i64> {
    let ready: BTreeMap<&str, bool> = pod
        .status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .map(|s| (s.name.as_str(), s.ready))
        .collect();
    let containers = pod
        .spec
        .as_ref()
        .map_or(&[][..], |s| s.containers.as_slice());
    let mut pending: Vec<i64> = containers
        .iter()
        .filter(|c| !ready.get(c.name.as_str()).copied().unwrap_or(false))
        .filter_map(|c| priority_of_key(barrier_key_of(c)?))
        .collect();
    crate::ordered::sort(&mut pending);
    pending
}

/// The key of the barrier ConfigMap a container waits for.
fn barrier_key_of(container: &Container) -> Option<&str> {
    let barrier = container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == BARRIER_ENV)?;
    let reference = barrier.value_from.as_ref()?.config_map_key_ref.as_ref()?;
    Some(&reference.key)
}

/// The names of the containers that `key` releases.
pub fn containers_gated_on<'a>(pod: &'a Pod, key: &str) -> Vec<&'a str> {
    pod.spec
        .iter()
        .flat_map(|spec| &spec.containers)
        .filter(|c| barrier_key_of(c) == Some(key))
        .map(|c| c.name.as_str())
        .collect()
}

/// What the barrier controller does next for a pod.
#[derive(Debug, PartialEq, Eq)]
pub enum BarrierStep {
    /// Add this key to the ConfigMap, releasing the next priority level.
    Release(String),
    /// Add this key and mark the pod completed: it was the last level.
    ReleaseLast(String),
    /// The highest level is released; its containers are not ready yet.
    Wait,
    /// Every level is released: mark the pod completed.
    Complete,
}

/// Given the pending priorities and the keys the ConfigMap already has,
/// release the highest pending level.
pub fn next_barrier_step<'a>(
    pending: &[i64],
    released_keys: impl IntoIterator<Item = &'a str>,
) -> BarrierStep {
    let released: Vec<&str> = released_keys.into_iter().collect();
    let (Some(lowest), Some(highest)) = (pending.iter().min(), pending.iter().max()) else {
        return BarrierStep::Complete;
    };
    if released.contains(&barrier_key(*lowest).as_str()) {
        return BarrierStep::Complete;
    }
    let key = barrier_key(*highest);
    if released.contains(&key.as_str()) {
        BarrierStep::Wait
    } else if highest == lowest {
        BarrierStep::ReleaseLast(key)
    } else {
        BarrierStep::Release(key)
    }
}

/// The controller has marked this pod: every level is released.
pub fn is_completed(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(COMPLETED_ANNOTATION))
        .is_some_and(|v| v == "true")
}

/// Whether the barrier controller has work for this pod, judged from the
/// pod alone (OpenKruise's enqueue filter less its ConfigMap check): not
/// marked completed, `ContainersReady` not True, and some gated container
/// not ready.
pub fn awaits_barrier(pod: &Pod) -> bool {
    !is_completed(pod)
        && condition(pod, "ContainersReady").is_none_or(|c| c.status != "True")
        && !pending_priorities(pod).is_empty()
}

/// What the barrier controller does for a pod, given its `<pod>-barrier`
/// ConfigMap as read now.
#[derive(Debug, PartialEq, Eq)]
pub enum BarrierPlan {
    /// Nothing: the pod is not gated, already completed, or ready.
    Ignore,
    /// Create the ConfigMap, empty and owned by the pod.
    Create,
    /// The ConfigMap belongs to an earlier pod of the same name (deleted and
    /// created again before the garbage collector removed it): delete the
    /// ConfigMap with this uid, so that its keys release nothing early.
    ReplaceStale { uid: String },
    /// Release (or wait, or complete) as [`next_barrier_step`] says.
    Step(BarrierStep),
}

pub fn plan_barrier(pod: &Pod, config_map: Option<&ConfigMap>) -> BarrierPlan {
    if !awaits_barrier(pod) {
        return BarrierPlan::Ignore;
    }
    let Some(config_map) = config_map else {
        return BarrierPlan::Create;
    };
    if let Some(uid) = stale_config_map_uid(pod, config_map) {
        return BarrierPlan::ReplaceStale { uid };
    }
    let keys = config_map.data.iter().flat_map(|data| data.keys());
    BarrierPlan::Step(next_barrier_step(
        &pending_priorities(pod),
        keys.map(String::as_str),
    ))
}

/// The ConfigMap's uid when it is owned by another pod of this pod's name
/// and not by this pod. A ConfigMap with no pod owner (made by hand) is
/// used as it is, as OpenKruise does.
fn stale_config_map_uid(pod: &Pod, config_map: &ConfigMap) -> Option<String> {
    let pod_uid = pod.metadata.uid.as_deref()?;
    let pod_name = pod.metadata.name.as_deref()?;
    let owners = config_map
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default();
    let pod_owners = || {
        owners
            .iter()
            .filter(|o| o.kind == "Pod" && o.api_version == "v1")
    };
    let owned_by_this_pod = pod_owners().any(|o| o.uid == pod_uid);
    let owned_by_a_namesake = pod_owners().any(|o| o.name == pod_name && o.uid != pod_uid);
    if owned_by_a_namesake && !owned_by_this_pod {
        config_map.metadata.uid.clone()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_including_negatives() {
        for priority in [0, 1, -1, 100, -2_147_483_647, 2_147_483_647] {
            assert_eq!(priority_of_key(&barrier_key(priority)), Some(priority));
        }
        assert_eq!(barrier_key(-5), "p_-5");
        assert_eq!(priority_of_key("c_1"), None);
        assert_eq!(priority_of_key("p_x"), None);
    }

    #[test]
    fn the_highest_pending_level_is_released_first() {
        // Spec 06 §4: main p_0, sidecar p_1, log p_-5.
        assert_eq!(
            next_barrier_step(&[-5, 0, 1], []),
            BarrierStep::Release("p_1".into())
        );
        assert_eq!(next_barrier_step(&[-5, 0, 1], ["p_1"]), BarrierStep::Wait);
        assert_eq!(
            next_barrier_step(&[-5, 0], ["p_1"]),
            BarrierStep::Release("p_0".into())
        );
        assert_eq!(
            next_barrier_step(&[-5], ["p_1", "p_0"]),
            BarrierStep::ReleaseLast("p_-5".into())
        );
        assert_eq!(
            next_barrier_step(&[-5], ["p_1", "p_0", "p_-5"]),
            BarrierStep::Complete
        );
        assert_eq!(next_barrier_step(&[], ["p_1"]), BarrierStep::Complete);
    }

    #[test]
    fn a_released_lowest_level_completes_the_pod() {
        assert_eq!(next_barrier_step(&[-1, 0], ["p_-1"]), BarrierStep::Complete);
    }

    #[test]
    fn generated_names_take_the_suffix_and_truncate_the_prefix() {
        assert_eq!(generated_name("web-", "b2c4d"), Ok("web-b2c4d".to_owned()));
        let long = "a".repeat(70);
        assert_eq!(generated_name(&long, "bbbbb").map(|n| n.len()), Ok(63));
        assert_eq!(
            generated_name("web-", "aaaaa"),
            Err(LaunchPriorityError::InvalidSuffix("aaaaa".into()))
        );
        assert_eq!(
            generated_name("web-", ""),
            Err(LaunchPriorityError::NoSuffix)
        );
    }
}
