//! Kubewarden policy: OpenKruise's SidecarSet injection. On Pod CREATE the
//! matching SidecarSets are injected (kruise-core does the work); every
//! other request is accepted unchanged.

mod settings;

/// The cluster reads (Kubewarden host calls), shared with the SidecarSet
/// validating policy.
pub use kruise_policy_support::cluster;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kruise_api::SidecarSet;
use kruise_core::sidecarset::{InjectionContext, inject};
use kruise_policy_support::{Answer, Outcome, pod_to_create, read_request, read_settings};
use kubewarden_policy_sdk::request::KubernetesAdmissionRequest;

pub use cluster::{Cluster, ListedSidecarSets, NoCluster};
pub use settings::{Settings, prepare};

/// What the decision needs from outside: the time, a random draw (for the
/// `Partial` revision policy) and the cluster.
#[derive(Clone, Copy, Debug)]
pub struct Environment<'a, C: Cluster> {
    /// RFC 3339, written as the hash records' `updateTimestamp`.
    pub now: &'a str,
    pub random_draw: f64,
    pub cluster: &'a C,
}

/// The decision for one admission request. A SidecarSet of the cluster
/// that cannot be read is left out, and named in a warning.
pub fn evaluate<C: Cluster>(
    request: &KubernetesAdmissionRequest,
    settings: &Settings,
    environment: &Environment<'_, C>,
) -> Answer {
    let pod = match pod_to_create(request) {
        Ok(Some(pod)) => pod,
        Ok(None) => return Outcome::Accept.into(),
        Err(message) => return Outcome::bad_request(message).into(),
    };
    let namespace = pod
        .metadata
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| Some(request.namespace.clone()).filter(|n| !n.is_empty()))
        .unwrap_or_else(|| "default".to_owned());
    let state = match ClusterState::read(settings, &namespace, environment.cluster) {
        Ok(state) => state,
        Err(message) => {
            return Outcome::Reject { message, code: 500 }.into();
        }
    };
    let warnings = state
        .unreadable
        .iter()
        .map(|message| format!("{message}; this SidecarSet is not injected until it is fixed"))
        .collect();
    Answer {
        outcome: inject_pod(&pod, request, &state, environment),
        warnings,
    }
}

fn inject_pod<C: Cluster>(
    pod: &Pod,
    request: &KubernetesAdmissionRequest,
    state: &ClusterState,
    environment: &Environment<'_, C>,
) -> Outcome {
    let context = InjectionContext {
        sidecar_sets: &state.sidecar_sets,
        namespace_labels: state.namespace_labels.as_ref(),
        request_namespace: Some(&request.namespace)
            .filter(|n| !n.is_empty())
            .map(String::as_str),
        now: environment.now,
        revisions: &state.revisions,
        random_draw: Some(environment.random_draw),
    };
    match inject(pod, &context) {
        Ok(injection) if injection.sidecar_sets.is_empty() => Outcome::Accept,
        Ok(injection) => match serde_json::to_value(injection.pod) {
            Ok(object) => Outcome::Mutate(object),
            Err(e) => Outcome::bad_request(format!("cannot write the pod: {e}")),
        },
        Err(e) => Outcome::bad_request(e.to_string()),
    }
}

/// What injection reads: from the settings, or from the cluster.
struct ClusterState {
    sidecar_sets: Vec<SidecarSet>,
    /// Why each SidecarSet of the cluster that could not be read was left out.
    unreadable: Vec<String>,
    namespace_labels: Option<BTreeMap<String, String>>,
    revisions: Vec<ControllerRevision>,
}

impl ClusterState {
    fn read<C: Cluster>(settings: &Settings, namespace: &str, cluster: &C) -> Result<Self, String> {
        if let Some(inline) = settings.inline_sidecar_sets() {
            return Ok(Self {
                sidecar_sets: inline?,
                namespace_labels: settings
                    .namespace_labels
                    .as_ref()
                    .and_then(|labels| labels.get(namespace))
                    .cloned(),
                revisions: Vec::new(),
                unreadable: Vec::new(),
            });
        }
        let listed = cluster.sidecar_sets()?;
        let sidecar_sets: Vec<SidecarSet> = listed.readable.into_iter().map(prepare).collect();
        let needs_namespace = sidecar_sets
            .iter()
            .any(|s| s.spec.namespace_selector.is_some());
        let namespace_labels = if needs_namespace {
            Some(cluster.namespace_labels(namespace)?)
        } else {
            None
        };
        let mut revisions = Vec::new();
        for sidecar_set in &sidecar_sets {
            let wants_revision = sidecar_set
                .spec
                .injection_strategy
                .as_ref()
                .is_some_and(|s| s.revision.is_some());
            if let (true, Some(name)) = (wants_revision, &sidecar_set.metadata.name) {
                revisions.extend(cluster.sidecar_set_revisions(name)?);
            }
        }
        Ok(Self {
            sidecar_sets,
            unreadable: listed.unreadable,
            namespace_labels,
            revisions,
        })
    }
}

/// The `validate` waPC operation: payload in, Kubewarden response out.
pub fn respond<C: Cluster>(
    payload: &[u8],
    environment: &Environment<'_, C>,
) -> Result<Vec<u8>, String> {
    let answer = match read_request::<Settings>(payload) {
        Ok(request) => evaluate(&request.request, &request.settings, environment),
        Err(message) => Outcome::bad_request(message).into(),
    };
    answer.into_payload().map_err(|e| e.to_string())
}

/// The `validate_settings` waPC operation.
pub fn validate_settings(payload: &[u8]) -> Result<Vec<u8>, String> {
    let verdict = read_settings::<Settings>(payload).and_then(|settings| settings.validate());
    let response = match verdict {
        Ok(()) => serde_json::json!({ "valid": true, "message": null }),
        Err(message) => serde_json::json!({ "valid": false, "message": message }),
    };
    serde_json::to_vec(&response).map_err(|e| e.to_string())
}

#[cfg(target_arch = "wasm32")]
mod guest {
    use crate::cluster::HostCluster;
    use crate::{Environment, respond};

    kruise_policy_support::export_policy!(
        validate: validate,
        validate_settings: crate::validate_settings,
    );

    fn validate(payload: &[u8]) -> Result<Vec<u8>, String> {
        let now = kruise_policy_support::clock::now_rfc3339();
        let environment = Environment {
            now: &now,
            random_draw: kruise_policy_support::clock::random_unit(),
            cluster: &HostCluster,
        };
        respond(payload, &environment)
    }
}
