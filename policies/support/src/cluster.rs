//! Reading SidecarSets, namespaces and revisions from the cluster through
//! Kubewarden's host capabilities (the sidecarset policy and the SidecarSet
//! validating policy both need them), and the pod and node the
//! ContainerRecreateRequest policy reads.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Node, Pod};
use kruise_api::{SidecarSet, stored_object_from_json};
use serde_json::value::RawValue;
use serde_json::{Value, json};

/// Where OpenKruise keeps SidecarSet ControllerRevisions.
pub const KRUISE_NAMESPACE: &str = "kruise-system";
/// OpenKruise's configuration ConfigMap there.
pub const KRUISE_CONFIGURATION: &str = "kruise-configuration";
const SIDECARSET_NAME_LABEL: &str = "kruise.io/sidecarset-name";
/// The host call that lists a kind in every namespace.
const LIST_ALL: &str = "list_resources_all";

/// The SidecarSets of the cluster: those that could be read, and a message
/// for each that could not (stored before a validating webhook existed, or
/// by an older version). One unreadable SidecarSet must not stop pods.
#[derive(Debug, Default)]
pub struct ListedSidecarSets {
    pub readable: Vec<SidecarSet>,
    pub unreadable: Vec<String>,
}

/// Reads a host's `List` answer of SidecarSets, setting aside the items
/// that do not parse. Only an answer that is not a List at all is an error.
///
/// Every pod creation reads this list, so each item is read from its text
/// straight into a SidecarSet, with no parsed document in between (nor a
/// copy of one); docs/benchmarks.md has what that saved.
pub fn read_sidecar_sets(answer: &[u8]) -> Result<ListedSidecarSets, String> {
    let list: ListAnswer<'_> = serde_json::from_slice(answer).map_err(|e| {
        format!("kubernetes/{LIST_ALL}: the host's answer is not a Kubernetes List: {e}")
    })?;
    let mut listed = ListedSidecarSets::default();
    for item in list.items {
        match stored_object_from_json(item.get()) {
            Ok(sidecar_set) => listed.readable.push(sidecar_set),
            Err(e) => listed
                .unreadable
                .push(format!("SidecarSet {}: {e}", item_name(item))),
        }
    }
    Ok(listed)
}

/// A Kubernetes `List`, its items kept as text until each is read.
#[derive(serde::Deserialize)]
struct ListAnswer<'a> {
    #[serde(borrow)]
    items: Vec<&'a RawValue>,
}

/// The name of a listed object that could not be read, for the message.
fn item_name(item: &RawValue) -> String {
    let document: Value = serde_json::from_str(item.get()).unwrap_or_default();
    document["metadata"]["name"]
        .as_str()
        .unwrap_or("unnamed")
        .to_owned()
}

/// The cluster state injection reads.
pub trait Cluster {
    /// The host's `List` answer of the cluster's SidecarSets, as sent.
    fn sidecar_sets_answer(&self) -> Result<Vec<u8>, String>;
    /// The SidecarSets of [`Cluster::sidecar_sets_answer`], read.
    fn sidecar_sets(&self) -> Result<ListedSidecarSets, String> {
        read_sidecar_sets(&self.sidecar_sets_answer()?)
    }
    fn namespace_labels(&self, namespace: &str) -> Result<BTreeMap<String, String>, String>;
    fn sidecar_set_revisions(&self, sidecar_set: &str) -> Result<Vec<ControllerRevision>, String>;
}

/// No cluster: only inline settings work.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoCluster;

impl Cluster for NoCluster {
    fn sidecar_sets_answer(&self) -> Result<Vec<u8>, String> {
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
        Ok(object) => kruise_api::outlined::from_value(object)
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

/// The cluster read through Kubewarden's `kubernetes` host capabilities.
/// `F` sends one call (operation, JSON request) and returns the host's
/// answer: waPC's host call in a module (`HOST_CLUSTER`), canned answers
/// in native tests and benchmarks, so the reading is the same in both.
#[derive(Clone, Copy, Debug)]
pub struct HostCalls<F>(pub F);

/// One `kubernetes` host call: operation and request in, answer out.
#[cfg(target_arch = "wasm32")]
pub type CallFn = fn(&str, &[u8]) -> Result<Vec<u8>, String>;

/// The cluster as the Kubewarden host serves it.
#[cfg(target_arch = "wasm32")]
pub type HostCluster = HostCalls<CallFn>;

/// The module's cluster: every read is a waPC host call.
#[cfg(target_arch = "wasm32")]
pub const HOST_CLUSTER: HostCluster = HostCalls(wapc_call);

#[cfg(target_arch = "wasm32")]
fn wapc_call(operation: &str, payload: &[u8]) -> Result<Vec<u8>, String> {
    kubewarden_policy_sdk::wapc_guest::host_call("kubewarden", "kubernetes", operation, payload)
        .map_err(|e| e.to_string())
}

impl<F: Fn(&str, &[u8]) -> Result<Vec<u8>, String>> HostCalls<F> {
    fn call(&self, operation: &str, request: &Value) -> Result<Value, String> {
        let answer = self.call_for_bytes(operation, request)?;
        serde_json::from_slice(&answer).map_err(|e| format!("kubernetes/{operation}: {e}"))
    }

    fn call_for_bytes(&self, operation: &str, request: &Value) -> Result<Vec<u8>, String> {
        let payload = serde_json::to_vec(request).map_err(|e| e.to_string())?;
        (self.0)(operation, &payload).map_err(|e| format!("kubernetes/{operation}: {e}"))
    }
}

impl<F: Fn(&str, &[u8]) -> Result<Vec<u8>, String>> Cluster for HostCalls<F> {
    fn sidecar_sets_answer(&self) -> Result<Vec<u8>, String> {
        self.call_for_bytes(LIST_ALL, &requests::list_sidecar_sets())
    }

    fn namespace_labels(&self, namespace: &str) -> Result<BTreeMap<String, String>, String> {
        let object = self.call("get_resource", &requests::get_namespace(namespace))?;
        match &object["metadata"]["labels"] {
            Value::Null => Ok(BTreeMap::new()),
            labels => serde_json::from_value(labels.clone())
                .map_err(|e| format!("namespace {namespace}: labels: {e}")),
        }
    }

    fn sidecar_set_revisions(&self, sidecar_set: &str) -> Result<Vec<ControllerRevision>, String> {
        let list = self.call(
            "list_resources_by_namespace",
            &requests::list_revisions(sidecar_set),
        )?;
        list_items(&list, |item| {
            kruise_api::outlined::from_value(item).map_err(|e| e.to_string())
        })
    }
}

impl<F: Fn(&str, &[u8]) -> Result<Vec<u8>, String>> PodsAndNodes for HostCalls<F> {
    fn pod(&self, namespace: &str, name: &str) -> Result<Option<Pod>, String> {
        let answer = self.call("get_resource", &requests::get_pod(namespace, name));
        found(answer, &format!("pod {namespace}/{name}"))
    }

    fn node(&self, name: &str) -> Result<Option<Node>, String> {
        let answer = self.call("get_resource", &requests::get_node(name));
        found(answer, &format!("node {name}"))
    }
}

impl<F: Fn(&str, &[u8]) -> Result<Vec<u8>, String>> KruiseConfiguration for HostCalls<F> {
    fn kruise_configuration(&self) -> Result<Option<BTreeMap<String, String>>, String> {
        let answer = self.call("get_resource", &requests::get_kruise_configuration());
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

    /// The cluster over canned host-call answers, as in a module.
    fn answering(list: Result<Value, String>) -> impl Cluster {
        HostCalls(move |operation: &str, request: &[u8]| {
            assert_eq!(operation, "list_resources_all");
            let request: Value = serde_json::from_slice(request).unwrap();
            assert_eq!(request["kind"], "SidecarSet");
            list.clone().map(|list| serde_json::to_vec(&list).unwrap())
        })
    }

    fn sidecar_set(name: &str, update_type: &str) -> Value {
        json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
               "metadata": {"name": name},
               "spec": {"containers": [{"name": "c", "image": "busybox"}],
                        "updateStrategy": {"type": update_type}, "unknownField": 1}})
    }

    #[test]
    fn listed_sidecarsets_are_read_one_by_one() {
        let list = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSetList",
            "items": [sidecar_set("good", "RollingUpdate"), sidecar_set("typo", "RollingUpdat"),
                      {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "spec": 3}]});
        let listed = answering(Ok(list)).sidecar_sets().unwrap();
        let names: Vec<_> = listed
            .readable
            .iter()
            .map(|s| s.metadata.name.as_deref())
            .collect();
        // Unknown fields are ignored, as the API server's pruning would.
        assert_eq!(names, [Some("good")]);
        assert_eq!(listed.unreadable.len(), 2, "{:?}", listed.unreadable);
        assert!(
            listed.unreadable[0].starts_with(
                "SidecarSet typo: spec.updateStrategy.type: unknown variant `RollingUpdat`"
            ),
            "{}",
            listed.unreadable[0]
        );
        assert!(
            listed.unreadable[1].starts_with("SidecarSet unnamed: spec: invalid type"),
            "{}",
            listed.unreadable[1]
        );
    }

    #[test]
    fn an_answer_that_is_no_list_or_a_host_error_fails_the_read() {
        let not_a_list = answering(Ok(json!({"kind": "SidecarSet"})))
            .sidecar_sets()
            .unwrap_err();
        assert!(
            not_a_list.starts_with(
                "kubernetes/list_resources_all: the host's answer is not a Kubernetes List"
            ),
            "{not_a_list}"
        );
        let refused = answering(Err("not allowed".to_owned()))
            .sidecar_sets()
            .unwrap_err();
        assert_eq!(refused, "kubernetes/list_resources_all: not allowed");
    }
}
