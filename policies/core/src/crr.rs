//! ContainerRecreateRequest: the three decisions OpenKruise splits between
//! its CRR webhook, its CRR controller and kruise-daemon, each a pure
//! function of the request, the pod and the time.
//!
//! - [`admission`]: defaulting and validation of a new request against its
//!   pod (labels, status context, preStop copied), and the immutable spec.
//! - [`controller`]: what the manager does with a request: complete it when
//!   the pod is gone, the daemon is silent or the deadline passed, keep the
//!   container-status snapshot, hold the pod not-ready, delete after the TTL.
//! - [`daemon`]: what the node agent does: pick one request per pod, work
//!   out each container's state from the runtime, kill the next container.

pub mod admission;
pub mod controller;
pub mod daemon;

use k8s_openapi::jiff::Timestamp;
use kruise_api::ContainerRecreateRequest;
use kruise_api::containerrecreaterequest::{
    ContainerStatusSnapshot, SYNC_CONTAINER_STATUSES_ANNOTATION, UNREADY_ACQUIRED_KEY,
};

/// The manager's last snapshot of the pod's containers (its annotation); a
/// value that is not such a list counts as no snapshot yet.
pub fn snapshot(request: &ContainerRecreateRequest) -> Vec<ContainerStatusSnapshot> {
    annotation(request, SYNC_CONTAINER_STATUSES_ANNOTATION)
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

/// When the manager started holding the pod not-ready (its annotation),
/// if it has and the time can be read.
pub fn unready_acquired_at(request: &ContainerRecreateRequest) -> Option<Timestamp> {
    annotation(request, UNREADY_ACQUIRED_KEY)?.parse().ok()
}

fn annotation<'a>(request: &'a ContainerRecreateRequest, key: &str) -> Option<&'a str> {
    request
        .metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}
