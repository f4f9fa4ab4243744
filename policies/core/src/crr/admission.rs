//! Defaulting and validation of a new ContainerRecreateRequest, and the
//! immutability of a stored one: OpenKruise's CRR mutating webhook
//! (`pkg/webhook/containerrecreaterequest/mutating/crr_mutating_handler.go`)
//! as pure functions of the request, its pod and the pod's node.
//!
//! A create is checked in OpenKruise's order and the first problem wins;
//! each refusal names the field and the value. Its feature-gate check is
//! left out: our node agent always runs.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::{Container, Node, Pod};
use kruise_api::ContainerRecreateRequest;
use kruise_api::KruiseObject;
use kruise_api::containerrecreaterequest::{
    ContainerRecreateRequestContainer, ContainerRecreateRequestContainerContext, NODE_NAME_LABEL,
    POD_UID_LABEL, ProbeHandler, UNREADY_ACQUIRED_KEY,
};

use crate::cloneset::container_status;

/// The shortest `activeDeadlineSeconds` OpenKruise accepts.
pub const MIN_ACTIVE_DEADLINE_SECONDS: i64 = 3;
/// The node label (and value) that marks a virtual kubelet; OpenKruise
/// copies it onto the request so that its daemon can tell such nodes apart.
pub const VIRTUAL_KUBELET_LABEL: &str = "type";
pub const VIRTUAL_KUBELET: &str = "virtual-kubelet";
/// The pod condition OpenKruise's SidecarTerminator sets when it has moved
/// a pod to a terminal phase: its sidecars still need a request to stop.
pub const SIDECAR_TERMINATED: &str = "SidecarTerminated";

const BAD_REQUEST: u16 = 400;
const FORBIDDEN: u16 = 403;

/// Why a request is refused, with the HTTP status the webhook answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub code: u16,
    pub message: String,
}

impl Refusal {
    fn bad_request(message: impl Into<String>) -> Self {
        Self {
            code: BAD_REQUEST,
            message: message.into(),
        }
    }

    fn forbidden(message: impl Into<String>) -> Self {
        Self {
            code: FORBIDDEN,
            message: message.into(),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The request as it is stored: defaulted, labelled with its pod and node,
/// and each container's preStop, ports and status context copied from the
/// pod. `pod` is the pod `spec.podName` in the request's namespace (`None`:
/// not found); `node` is that pod's node (`None`: not found).
pub fn admit_create(
    crr: &ContainerRecreateRequest,
    pod: Option<&Pod>,
    node: Option<&Node>,
) -> Result<ContainerRecreateRequest, Refusal> {
    check_request(crr)?;
    let mut crr = crr.clone();
    // An empty strategy, failurePolicy Fail and the `active` label. An
    // unknown failurePolicy never gets here: reading the request refuses it.
    crr.set_defaults();
    let pod = pod.ok_or_else(|| pod_not_found(&crr))?;
    let node_name = node_to_read(&crr, pod)?;
    let node = node.ok_or_else(|| {
        Refusal::bad_request(format!(
            "spec.podName: node {node_name:?} of Pod {} not found",
            crr.spec.pod_name
        ))
    })?;
    label_with_pod_and_node(&mut crr, pod, node_name, node);
    default_grace_period(&mut crr, pod);
    let pod_name = crr.spec.pod_name.clone();
    // Each container once: the agent keys its per-container states by
    // name. (OpenKruise means to refuse a repeat but never records the
    // names it has seen, so it lets one through.)
    let mut seen = BTreeSet::new();
    for (index, container) in crr.spec.containers.iter_mut().enumerate() {
        if !seen.insert(container.name.clone()) {
            return Err(Refusal::bad_request(format!(
                "spec.containers[{index}].name: can not recreate container {:?} multiple times",
                container.name
            )));
        }
        fill_container(container, index, pod, &pod_name)?;
    }
    Ok(crr)
}

/// An update may change neither the spec nor the labels that tie the
/// request to its pod and node, nor (OpenKruise up to v1.8) the time the
/// pod was first held not-ready, once set.
pub fn admit_update(
    new: &ContainerRecreateRequest,
    old: &ContainerRecreateRequest,
) -> Result<(), Refusal> {
    if new.spec != old.spec {
        return Err(Refusal::forbidden(
            "spec: the spec of a ContainerRecreateRequest is immutable",
        ));
    }
    for label in [POD_UID_LABEL, NODE_NAME_LABEL] {
        let (was, is) = (
            value_of(old.metadata.labels.as_ref(), label),
            value_of(new.metadata.labels.as_ref(), label),
        );
        if was != is {
            return Err(Refusal::forbidden(format!(
                "metadata.labels[{label}]: not allowed to update immutable label from {was:?} to {is:?}"
            )));
        }
    }
    let was = value_of(old.metadata.annotations.as_ref(), UNREADY_ACQUIRED_KEY);
    let is = value_of(new.metadata.annotations.as_ref(), UNREADY_ACQUIRED_KEY);
    if !was.is_empty() && was != is {
        return Err(Refusal::forbidden(format!(
            "metadata.annotations[{UNREADY_ACQUIRED_KEY}]: not allowed to update immutable annotation from {was:?} to {is:?}"
        )));
    }
    Ok(())
}

/// A missing key reads as "", as a Go map does.
fn value_of<'a>(map: Option<&'a BTreeMap<String, String>>, key: &str) -> &'a str {
    map.and_then(|m| m.get(key)).map_or("", String::as_str)
}

/// The checks that need neither the pod nor the node, which
/// [`admit_create`] makes first. A caller that reads the pod only when
/// needed makes them before reading it, so that a cluster it cannot read
/// does not hide the request's own mistake.
pub fn check_request(crr: &ContainerRecreateRequest) -> Result<(), Refusal> {
    let spec = &crr.spec;
    if spec.pod_name.is_empty() {
        return Err(Refusal::bad_request(
            "spec.podName: podName can not be empty",
        ));
    }
    if spec.containers.is_empty() {
        return Err(Refusal::bad_request(
            "spec.containers: containers list can not be empty",
        ));
    }
    if let Some(deadline) = spec
        .active_deadline_seconds
        .filter(|d| *d < MIN_ACTIVE_DEADLINE_SECONDS)
    {
        return Err(Refusal::bad_request(format!(
            "spec.activeDeadlineSeconds: {deadline}: activeDeadlineSeconds can not be less than {MIN_ACTIVE_DEADLINE_SECONDS}s"
        )));
    }
    let strategy = spec.strategy.as_ref();
    for (field, value) in [
        (
            "terminationGracePeriodSeconds",
            strategy.and_then(|s| s.termination_grace_period_seconds),
        ),
        (
            "unreadyGracePeriodSeconds",
            strategy.and_then(|s| s.unready_grace_period_seconds),
        ),
    ] {
        if let Some(seconds) = value.filter(|s| *s < 0) {
            return Err(Refusal::bad_request(format!(
                "spec.strategy.{field}: {seconds}: {field} must be non-negative integer"
            )));
        }
    }
    Ok(())
}

fn pod_not_found(crr: &ContainerRecreateRequest) -> Refusal {
    let namespace = crr.metadata.namespace.as_deref().unwrap_or("default");
    Refusal::bad_request(format!(
        "spec.podName: no found Pod named {:?} in namespace {namespace:?}",
        crr.spec.pod_name
    ))
}

/// The node [`admit_create`] needs, once the pod is known to be one whose
/// containers may be recreated: one still running (kube-controller-manager's
/// `IsPodActive`: not Succeeded or Failed, not being deleted), or one
/// OpenKruise's SidecarTerminator finished whose sidecars are still to be
/// stopped; and one scheduled to a node.
pub fn node_to_read<'a>(crr: &ContainerRecreateRequest, pod: &'a Pod) -> Result<&'a str, Refusal> {
    let pod_name = &crr.spec.pod_name;
    if let Some(why) = inactive(pod).filter(|_| !terminated_by_sidecar_terminator(pod)) {
        return Err(Refusal::bad_request(format!(
            "spec.podName: not allowed to recreate containers in an inactive Pod {pod_name} ({why})"
        )));
    }
    pod.spec
        .as_ref()
        .and_then(|spec| spec.node_name.as_deref())
        .filter(|name| !name.is_empty())
        .ok_or_else(|| {
            Refusal::bad_request(format!(
                "spec.podName: not allowed to recreate containers in a pending Pod {pod_name} (no spec.nodeName)"
            ))
        })
}

/// Why the pod is not active, if it is not.
fn inactive(pod: &Pod) -> Option<String> {
    if pod.metadata.deletion_timestamp.is_some() {
        return Some("it is being deleted".to_owned());
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    phase
        .filter(|p| matches!(*p, "Succeeded" | "Failed"))
        .map(|p| format!("phase {p}"))
}

fn terminated_by_sidecar_terminator(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| conditions.iter().any(|c| c.type_ == SIDECAR_TERMINATED))
}

/// The node-name and pod-uid labels the node agent selects its requests
/// by, and the virtual-kubelet mark of the node.
fn label_with_pod_and_node(
    crr: &mut ContainerRecreateRequest,
    pod: &Pod,
    node_name: &str,
    node: &Node,
) {
    let labels = crr.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(NODE_NAME_LABEL.to_owned(), node_name.to_owned());
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    labels.insert(POD_UID_LABEL.to_owned(), uid);
    let virtual_kubelet = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(VIRTUAL_KUBELET_LABEL))
        .is_some_and(|v| v == VIRTUAL_KUBELET);
    if virtual_kubelet {
        labels.insert(VIRTUAL_KUBELET_LABEL.to_owned(), VIRTUAL_KUBELET.to_owned());
    }
}

/// The pod's own grace period unless the request sets one. A pod without
/// one (the API server always defaults it, so only a hand-made object)
/// leaves it unset, as OpenKruise does; the node agent then waits 30 s,
/// kubelet's default.
fn default_grace_period(crr: &mut ContainerRecreateRequest, pod: &Pod) {
    let from_pod = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds);
    if let Some(strategy) = crr.spec.strategy.as_mut() {
        strategy.termination_grace_period_seconds =
            strategy.termination_grace_period_seconds.or(from_pod);
    }
}

/// Checks one requested container against the pod and fills in what the
/// node agent needs to recreate it.
fn fill_container(
    container: &mut ContainerRecreateRequestContainer,
    index: usize,
    pod: &Pod,
    pod_name: &str,
) -> Result<(), Refusal> {
    let field = format!("spec.containers[{index}]");
    if let Some(set) = read_only_field_set(container) {
        return Err(Refusal::bad_request(format!(
            "{field}.{set}: read-only: preStop, ports and statusContext are filled in from the Pod"
        )));
    }
    let name = container.name.as_str();
    let pod_container = pod_container(pod, name).ok_or_else(|| {
        Refusal::bad_request(format!(
            "{field}.name: container {name:?} is not in pod {pod_name}{}",
            if is_init_container(pod, name) {
                " (init containers can not be recreated)"
            } else {
                ""
            }
        ))
    })?;
    let status = container_status(pod, name).ok_or_else(|| {
        Refusal::bad_request(format!(
            "{field}.name: container {name:?} has no containerStatus in pod {pod_name}"
        ))
    })?;
    let container_id = status
        .container_id
        .as_deref()
        .filter(|id| !id.is_empty())
        .ok_or_else(|| {
            Refusal::bad_request(format!(
                "{field}.name: container {name:?} of pod {pod_name} has no containerID: it is not initialized yet"
            ))
        })?;
    container.pre_stop = pre_stop_of(pod_container);
    if container
        .pre_stop
        .as_ref()
        .is_some_and(|p| p.http_get.is_some())
    {
        // A named port in the hook's URL is resolved against these.
        container.ports = pod_container.ports.clone().unwrap_or_default();
    }
    container.status_context = Some(ContainerRecreateRequestContainerContext {
        container_id: container_id.to_owned(),
        restart_count: status.restart_count,
    });
    Ok(())
}

/// The first of the fields only the webhook writes that the user set.
fn read_only_field_set(container: &ContainerRecreateRequestContainer) -> Option<&'static str> {
    if container.pre_stop.is_some() {
        Some("preStop")
    } else if !container.ports.is_empty() {
        Some("ports")
    } else if container.status_context.is_some() {
        Some("statusContext")
    } else {
        None
    }
}

/// The pod container's preStop hook as the node agent can run it. A
/// request's hook has exec, httpGet and tcpSocket only; a hook that is a
/// `sleep` (Kubernetes 1.29+) has none of them and is not copied: an empty
/// hook would only ask the agent to run nothing (OpenKruise copies an
/// empty one, which its daemon then reports as an invalid handler).
fn pre_stop_of(container: &Container) -> Option<ProbeHandler> {
    let hook = container.lifecycle.as_ref()?.pre_stop.as_ref()?;
    let handler = ProbeHandler {
        exec: hook.exec.clone(),
        http_get: hook.http_get.clone(),
        tcp_socket: hook.tcp_socket.clone(),
    };
    (handler != ProbeHandler::default()).then_some(handler)
}

fn pod_container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == name)
}

fn is_init_container(pod: &Pod, name: &str) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|init| init.iter().any(|c| c.name == name))
}
