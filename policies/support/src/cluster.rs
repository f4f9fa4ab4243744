//! Reading SidecarSets, namespaces and revisions from the cluster through
//! Kubewarden's host capabilities (the sidecarset policy and the SidecarSet
//! validating policy both need them), and the pod and node the
//! ContainerRecreateRequest policy reads.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Node, Pod};
use kruise_api::{SidecarSet, Strictness, object_from_value};
use serde_json::{Value, json};

/// Where OpenKruise keeps SidecarSet ControllerRevisions.
pub const KRUISE_NAMESPACE: &str = "kruise-system";
/// OpenKruise's configuration ConfigMap there.
pub const KRUISE_CONFIGURATION: &str = "kruise-configuration";
const SIDECARSET_NAME_LABEL: &str = "kruise.io/sidecarset-name";

/// The SidecarSets of the cluster: those that could be read, and a message
/// for each that could not (stored before a validating webhook existed, or
/// by an older version). One unreadable SidecarSet must not stop pods.
#[derive(Debug, Default)]
pub struct ListedSidecarSets {
    pub readable: Vec<SidecarSet>,
    pub unreadable: Vec<String>,
}

/// Reads a Kubernetes `List` of SidecarSets, setting aside the items that
/// do not parse. Only an answer that is not a List at all is an error.
pub fn read_sidecar_sets(list: &Value) -> Result<ListedSidecarSets, String> {
    let mut listed = ListedSidecarSets::default();
    for item in list_items(list, Ok)? {
        match read_sidecar_set(item) {
            Ok(sidecar_set) => listed.readable.push(sidecar_set),
            Err(message) => listed.unreadable.push(message),
        }
    }
    Ok(listed)
}

/// The cluster state injection reads.
pub trait Cluster {
    fn sidecar_sets(&self) -> Result<ListedSidecarSets, String>;
    fn namespace_labels(&self, namespace: &str) -> Result<BTreeMap<String, String>, String>;
    fn sidecar_set_revisions(&self, sidecar_set: &str) -> Result<Vec<ControllerRevision>, String>;
}

/// No cluster: only inline settings work.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoCluster;

impl Cluster for NoCluster {
    fn sidecar_sets(&self) -> Result<ListedSidecarSets, String> {
        Err("no sidecarSets in the settings and no cluster to read them from".to_owned())
    }
    fn namespace_labels(&self, namespace: &str) -> Result<BTreeMap<String, String>, String> {
        Err(format!("no cluster to read namespace {namespace} from"))
    }
    fn sidecar_set_revisions(&self, sidecar_set: &str) -> Result<Vec<ControllerRevision>, String> {
        Err(format!(
            "no cluster to read the revisions of SidecarSet {sidecar_set} from"
        ))
    }
}

/// The reads of the ContainerRecreateRequest policy: the request's pod and
/// that pod's node, `None` when the object does not exist.
pub trait PodsAndNodes {
    fn pod(&self, namespace: &str, name: &str) -> Result<Option<Pod>, String>;
    fn node(&self, name: &str) -> Result<Option<Node>, String>;
}

/// The read of the SidecarSet validating policy: OpenKruise's
/// `kruise-configuration` ConfigMap in [`KRUISE_NAMESPACE`] (its
/// `patchPodMetadata` whitelist).
pub trait KruiseConfiguration {
    /// The ConfigMap's data; `None` when there is no such ConfigMap.
    fn kruise_configuration(&self) -> Result<Option<BTreeMap<String, String>>, String>;
}

/// Whether a failed `get_resource` says the object does not exist. Hosts
/// answer that with an error, not an empty object: ours with
/// `pod "web-0" not found`; policy-server with the API server's
/// `pods "web-0" not found` and its `NotFound` reason, or, when it reads
/// its watch cache (kwctl, policy-server's cached reads), with
/// `Cannot find v1/ConfigMap named '…' inside of namespace '…'`.
pub fn is_not_found(message: &str) -> bool {
    message.contains("\" not found")
        || message.contains("NotFound")
        || message.contains("Cannot find ")
}

/// A `get_resource` answer as `T`, a not-found error as `None`.
pub fn found<T: serde::de::DeserializeOwned>(
    answer: Result<Value, String>,
    what: &str,
) -> Result<Option<T>, String> {
    match answer {
        Ok(object) => serde_json::from_value(object)
            .map(Some)
            .map_err(|e| format!("{what}: {e}")),
        Err(message) if is_not_found(&message) => Ok(None),
        Err(message) => Err(message),
    }
}

/// Reads a Kubernetes `List` answer into objects of one type.
pub fn list_items<T>(
    list: &Value,
    read: impl Fn(Value) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    let items = list
        .get("items")
        .and_then(Value::as_array)
        .ok_or("the host's answer is not a Kubernetes List")?;
    items.iter().cloned().map(read).collect()
}

pub fn read_sidecar_set(item: Value) -> Result<SidecarSet, String> {
    let name = item["metadata"]["name"]
        .as_str()
        .unwrap_or("unnamed")
        .to_owned();
    object_from_value(item, Strictness::Lenient).map_err(|e| format!("SidecarSet {name}: {e}"))
}

/// The requests the guest sends, kept apart from the host call so they can
/// be checked natively.
pub mod requests {
    use super::{KRUISE_CONFIGURATION, KRUISE_NAMESPACE, SIDECARSET_NAME_LABEL, Value, json};

    pub fn list_sidecar_sets() -> Value {
        json!({"api_version": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
               "label_selector": null, "field_selector": null, "field_masks": null})
    }

    pub fn get_namespace(name: &str) -> Value {
        json!({"api_version": "v1", "kind": "Namespace", "name": name, "namespace": null,
               "disable_cache": false, "field_masks": null})
    }

    pub fn get_pod(namespace: &str, name: &str) -> Value {
        json!({"api_version": "v1", "kind": "Pod", "name": name, "namespace": namespace,
               "disable_cache": false, "field_masks": null})
    }

    pub fn get_kruise_configuration() -> Value {
        json!({"api_version": "v1", "kind": "ConfigMap", "name": KRUISE_CONFIGURATION,
               "namespace": KRUISE_NAMESPACE, "disable_cache": false, "field_masks": null})
    }

    pub fn get_node(name: &str) -> Value {
        json!({"api_version": "v1", "kind": "Node", "name": name, "namespace": null,
               "disable_cache": false, "field_masks": null})
    }

    pub fn list_revisions(sidecar_set: &str) -> Value {
        json!({"api_version": "apps/v1", "kind": "ControllerRevision",
               "namespace": KRUISE_NAMESPACE,
               "label_selector": format!("{SIDECARSET_NAME_LABEL}={sidecar_set}"),
               "field_selector": null, "field_masks": null})
    }
}

/// The cluster as the Kubewarden host serves it.
#[cfg(target_arch = "wasm32")]
#[derive(Clone, Copy, Debug)]
pub struct HostCluster;

#[cfg(target_arch = "wasm32")]
impl HostCluster {
    fn call(operation: &str, request: &Value) -> Result<Value, String> {
        let payload = serde_json::to_vec(request).map_err(|e| e.to_string())?;
        let answer = kubewarden_policy_sdk::wapc_guest::host_call(
            "kubewarden",
            "kubernetes",
            operation,
            &payload,
        )
        .map_err(|e| format!("kubernetes/{operation}: {e}"))?;
        serde_json::from_slice(&answer).map_err(|e| format!("kubernetes/{operation}: {e}"))
    }
}

#[cfg(target_arch = "wasm32")]
impl Cluster for HostCluster {
    fn sidecar_sets(&self) -> Result<ListedSidecarSets, String> {
        let list = Self::call("list_resources_all", &requests::list_sidecar_sets())?;
        read_sidecar_sets(&list)
    }

    fn namespace_labels(&self, namespace: &str) -> Result<BTreeMap<String, String>, String> {
        let object = Self::call("get_resource", &requests::get_namespace(namespace))?;
        match &object["metadata"]["labels"] {
            Value::Null => Ok(BTreeMap::new()),
            labels => serde_json::from_value(labels.clone())
                .map_err(|e| format!("namespace {namespace}: labels: {e}")),
        }
    }

    fn sidecar_set_revisions(&self, sidecar_set: &str) -> Result<Vec<ControllerRevision>, String> {
        let list = Self::call(
            "list_resources_by_namespace",
            &requests::list_revisions(sidecar_set),
        )?;
        list_items(&list, |item| {
            serde_json::from_value(item).map_err(|e| e.to_string())
        })
    }
}

#[cfg(target_arch = "wasm32")]
impl PodsAndNodes for HostCluster {
    fn pod(&self, namespace: &str, name: &str) -> Result<Option<Pod>, String> {
        let answer = Self::call("get_resource", &requests::get_pod(namespace, name));
        found(answer, &format!("pod {namespace}/{name}"))
    }

    fn node(&self, name: &str) -> Result<Option<Node>, String> {
        let answer = Self::call("get_resource", &requests::get_node(name));
        found(answer, &format!("node {name}"))
    }
}

#[cfg(target_arch = "wasm32")]
impl KruiseConfiguration for HostCluster {
    fn kruise_configuration(&self) -> Result<Option<BTreeMap<String, String>>, String> {
        let answer = Self::call("get_resource", &requests::get_kruise_configuration());
        let found: Option<k8s_openapi::api::core::v1::ConfigMap> =
            found(answer, "configmap kruise-configuration")?;
        Ok(found.map(|map| map.data.unwrap_or_default()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn not_found_as_each_host_says_it() {
        // Ours (host/src/cluster_fixtures.rs) and policy-server's (kube-rs).
        assert!(is_not_found("pod \"web-0\" not found"));
        assert!(is_not_found(
            "ApiError: pods \"web-0\" not found: NotFound (ErrorResponse { code: 404 })"
        ));
        assert!(is_not_found(
            "Callback evaluation failure: Cannot find v1/ConfigMap named 'kruise-configuration' \
             inside of namespace 'Some(\"kruise-system\")'"
        ));
        assert!(!is_not_found("v1 Pod is not watched by this host"));
        assert!(!is_not_found("no cluster in this test"));
    }

    #[test]
    fn a_get_answer_is_found_missing_or_an_error() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0"}});
        let found_pod: Option<Pod> = found(Ok(pod), "pod default/web-0").unwrap();
        assert_eq!(found_pod.unwrap().metadata.name.as_deref(), Some("web-0"));
        let missing: Option<Node> =
            found(Err("node \"n\" not found".to_owned()), "node n").unwrap();
        assert!(missing.is_none());
        let error = found::<Node>(Err("timed out".to_owned()), "node n").unwrap_err();
        assert_eq!(error, "timed out");
        let garbage = found::<Pod>(Ok(json!({"spec": {"containers": 3}})), "pod default/x");
        assert!(garbage.unwrap_err().starts_with("pod default/x: "));
    }

    #[test]
    fn pod_and_node_requests_name_their_object() {
        let pod = requests::get_pod("default", "web-0");
        assert_eq!(
            (pod["kind"].as_str(), pod["namespace"].as_str()),
            (Some("Pod"), Some("default"))
        );
        let node = requests::get_node("node-1");
        assert_eq!(node["kind"], "Node");
        assert!(node["namespace"].is_null());
    }
}
