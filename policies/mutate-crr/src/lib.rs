//! Kubewarden policy: the ContainerRecreateRequest webhook. A CREATE of an
//! `apps.kruise.io/v1alpha1` ContainerRecreateRequest is defaulted from its
//! pod and the pod's node (read from the cluster) and checked by
//! `kruise_core::crr::admission`; an UPDATE may not touch the spec or the
//! labels that tie the request to its pod. A request that does not parse
//! is refused (422) naming the field. Takes no settings.

use k8s_openapi::api::core::v1::Node;
use kruise_api::ContainerRecreateRequest;
use kruise_core::crr::admission::{
    Refusal, admit_create, admit_update, check_request, node_to_read,
};
use kruise_policy_support::cluster::PodsAndNodes;
/// The policy takes no settings; any given are refused.
pub use kruise_policy_support::{
    NoSettings as Settings, validate_no_settings as validate_settings,
};
use kruise_policy_support::{Outcome, invalid, object_name, read_object};
use kubewarden_policy_sdk::request::KubernetesAdmissionRequest;

const KIND: &str = "ContainerRecreateRequest";
const INTERNAL_ERROR: u16 = 500;

/// The decision for one admission request.
pub fn evaluate<C: PodsAndNodes>(request: &KubernetesAdmissionRequest, cluster: &C) -> Outcome {
    let is_crr = request.kind.group == "apps.kruise.io"
        && request.kind.kind == KIND
        && request.sub_resource.is_empty();
    if !is_crr {
        return Outcome::Accept;
    }
    match request.operation.as_str() {
        "CREATE" => create(request, cluster),
        "UPDATE" => update(request),
        _ => Outcome::Accept,
    }
}

fn create<C: PodsAndNodes>(request: &KubernetesAdmissionRequest, cluster: &C) -> Outcome {
    let crr = match read_object::<ContainerRecreateRequest>(&request.object) {
        Ok(crr) => crr,
        Err(message) => return invalid(KIND, &object_name(request), &[message]),
    };
    // The request's own mistakes first: a cluster we cannot read must not
    // hide them, and an empty podName is no name to look up.
    if let Err(refusal) = check_request(&crr) {
        return refuse(refusal);
    }
    let pod_name = &crr.spec.pod_name;
    let pod = match cluster.pod(namespace(request, &crr), pod_name) {
        Ok(pod) => pod,
        Err(message) => return cannot_read(&format!("failed to find Pod {pod_name}: {message}")),
    };
    // The node is read only for a pod that may have containers recreated;
    // otherwise admit_create refuses without it.
    let node_name = pod.as_ref().and_then(|p| node_to_read(&crr, p).ok());
    let node: Option<Node> = match node_name.map(|name| (name, cluster.node(name))) {
        None => None,
        Some((_, Ok(node))) => node,
        Some((name, Err(message))) => {
            return cannot_read(&format!("failed to find Node {name}: {message}"));
        }
    };
    match admit_create(&crr, pod.as_ref(), node.as_ref()) {
        Ok(admitted) => match serde_json::to_value(&admitted) {
            Ok(object) => Outcome::Mutate(object),
            Err(e) => cannot_read(&format!("cannot write the defaulted request: {e}")),
        },
        Err(refusal) => refuse(refusal),
    }
}

/// A stored request that no longer parses (written before this webhook
/// existed, or by an older version) is let through: there is nothing to
/// compare with, and refusing would stop the controller from finishing it
/// and removing its finalizer.
fn update(request: &KubernetesAdmissionRequest) -> Outcome {
    let Ok(old) = read_object::<ContainerRecreateRequest>(&request.old_object) else {
        return Outcome::Accept;
    };
    let new = match read_object::<ContainerRecreateRequest>(&request.object) {
        Ok(new) => new,
        Err(message) => return invalid(KIND, &object_name(request), &[message]),
    };
    match admit_update(&new, &old) {
        Ok(()) => Outcome::Accept,
        Err(refusal) => refuse(refusal),
    }
}

fn refuse(refusal: Refusal) -> Outcome {
    Outcome::Reject {
        message: refusal.message,
        code: refusal.code,
    }
}

fn cannot_read(message: &str) -> Outcome {
    Outcome::Reject {
        message: message.to_owned(),
        code: INTERNAL_ERROR,
    }
}

/// The API server fills in the request's namespace; the object's is the
/// fallback for a hand-made request.
fn namespace<'a>(
    request: &'a KubernetesAdmissionRequest,
    crr: &'a ContainerRecreateRequest,
) -> &'a str {
    if request.namespace.is_empty() {
        crr.metadata.namespace.as_deref().unwrap_or("default")
    } else {
        &request.namespace
    }
}

/// The `validate` waPC operation.
pub fn validate_payload<C: PodsAndNodes>(payload: &[u8], cluster: &C) -> Result<Vec<u8>, String> {
    kruise_policy_support::answer_without_settings(payload, |request| evaluate(request, cluster))
}

kruise_policy_support::export_policy!(
    validate_reading_cluster: validate_payload,
    validate_settings: validate_settings,
);

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::cell::RefCell;

    use k8s_openapi::api::core::v1::Pod;
    use serde_json::{Value, json};

    use super::*;

    /// A cluster of at most one pod and one node that records its reads.
    #[derive(Default)]
    struct Fake {
        pod: Option<Value>,
        node: Option<Value>,
        error: Option<&'static str>,
        reads: RefCell<Vec<String>>,
    }

    impl PodsAndNodes for Fake {
        fn pod(&self, namespace: &str, name: &str) -> Result<Option<Pod>, String> {
            self.reads
                .borrow_mut()
                .push(format!("pod {namespace}/{name}"));
            self.error.map_or(Ok(()), |e| Err(e.to_owned()))?;
            Ok(self.pod.clone().map(|p| serde_json::from_value(p).unwrap()))
        }
        fn node(&self, name: &str) -> Result<Option<Node>, String> {
            self.reads.borrow_mut().push(format!("node {name}"));
            Ok(self
                .node
                .clone()
                .map(|n| serde_json::from_value(n).unwrap()))
        }
    }

    fn pod(phase: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "team", "uid": "u-1"},
            "spec": {"nodeName": "node-1", "containers": [{"name": "app", "image": "nginx"}]},
            "status": {"phase": phase, "containerStatuses": [
                {"name": "app", "ready": true, "restartCount": 1, "image": "nginx",
                 "imageID": "", "containerID": "containerd://ab"}]},
        })
    }

    fn seeded() -> Fake {
        Fake {
            pod: Some(pod("Running")),
            node: Some(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}})),
            ..Fake::default()
        }
    }

    fn crr() -> Value {
        json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ContainerRecreateRequest",
            "metadata": {"name": "r", "namespace": "team"},
            "spec": {"podName": "web-0", "containers": [{"name": "app"}]},
        })
    }

    fn request(operation: &str, object: &Value, old: Option<&Value>) -> KubernetesAdmissionRequest {
        let mut request = json!({
            "uid": "1",
            "kind": {"group": "apps.kruise.io", "version": "v1alpha1", "kind": KIND},
            "resource": {"group": "apps.kruise.io", "version": "v1alpha1",
                         "resource": "containerrecreaterequests"},
            "namespace": "team",
            "operation": operation,
            "object": object,
        });
        if let Some(old) = old {
            request["oldObject"] = old.clone();
        }
        serde_json::from_value(request).unwrap()
    }

    fn code_of(outcome: &Outcome) -> Option<u16> {
        match outcome {
            Outcome::Reject { code, .. } => Some(*code),
            _ => None,
        }
    }

    #[test]
    fn a_create_is_defaulted_from_the_pod_and_node() {
        let cluster = seeded();
        let Outcome::Mutate(object) = evaluate(&request("CREATE", &crr(), None), &cluster) else {
            panic!("not mutated")
        };
        assert_eq!(
            object["metadata"]["labels"]["crr.apps.kruise.io/pod-uid"],
            "u-1"
        );
        assert_eq!(
            object["spec"]["containers"][0]["statusContext"],
            json!({"containerID": "containerd://ab", "restartCount": 1})
        );
        assert_eq!(*cluster.reads.borrow(), ["pod team/web-0", "node node-1"]);
    }

    #[test]
    fn the_request_is_checked_before_the_cluster_is_read() {
        let cluster = Fake {
            error: Some("unreachable"),
            ..seeded()
        };
        let mut empty = crr();
        empty["spec"]["podName"] = json!("");
        let outcome = evaluate(&request("CREATE", &empty, None), &cluster);
        assert_eq!(code_of(&outcome), Some(400));
        assert!(cluster.reads.borrow().is_empty());
    }

    #[test]
    fn an_unreadable_cluster_is_an_internal_error() {
        let cluster = Fake {
            error: Some("timed out"),
            ..seeded()
        };
        let outcome = evaluate(&request("CREATE", &crr(), None), &cluster);
        assert_eq!(
            outcome,
            Outcome::Reject {
                message: "failed to find Pod web-0: timed out".to_owned(),
                code: 500
            }
        );
    }

    #[test]
    fn the_node_is_not_read_for_a_pod_that_cannot_be_recreated() {
        let cluster = Fake {
            pod: Some(pod("Succeeded")),
            ..seeded()
        };
        let outcome = evaluate(&request("CREATE", &crr(), None), &cluster);
        assert_eq!(code_of(&outcome), Some(400));
        assert_eq!(*cluster.reads.borrow(), ["pod team/web-0"]);
        let missing = Fake {
            pod: None,
            ..seeded()
        };
        let outcome = evaluate(&request("CREATE", &crr(), None), &missing);
        let Outcome::Reject { message, code } = outcome else {
            panic!("admitted")
        };
        assert_eq!(code, 400);
        assert!(
            message.contains(r#"no found Pod named "web-0" in namespace "team""#),
            "{message}"
        );
    }

    #[test]
    fn an_unparseable_request_is_refused_naming_the_field() {
        let mut bad = crr();
        bad["spec"]["strategy"] = json!({"failurePolicy": "Retry"});
        let Outcome::Reject { message, code } = evaluate(&request("CREATE", &bad, None), &seeded())
        else {
            panic!("admitted")
        };
        assert_eq!(code, 422);
        assert!(
            message.starts_with(
                r#"ContainerRecreateRequest "r" is invalid: spec.strategy.failurePolicy: "#
            ),
            "{message}"
        );
        let update = evaluate(&request("UPDATE", &bad, Some(&crr())), &seeded());
        assert_eq!(code_of(&update), Some(422));
    }

    #[test]
    fn updates_keep_the_spec_and_read_nothing() {
        let cluster = seeded();
        let old = crr();
        let mut status = old.clone();
        status["status"] = json!({"phase": "Recreating"});
        assert_eq!(
            evaluate(&request("UPDATE", &status, Some(&old)), &cluster),
            Outcome::Accept
        );
        let mut changed = old.clone();
        changed["spec"]["podName"] = json!("web-1");
        let outcome = evaluate(&request("UPDATE", &changed, Some(&old)), &cluster);
        assert_eq!(code_of(&outcome), Some(403));
        assert!(cluster.reads.borrow().is_empty());
    }

    #[test]
    fn a_stored_request_that_no_longer_parses_can_still_be_updated() {
        let mut stored = crr();
        stored["spec"]["strategy"] = json!({"failurePolicy": "Retry"});
        let mut finished = stored.clone();
        finished["metadata"]["finalizers"] = json!([]);
        let outcome = evaluate(&request("UPDATE", &finished, Some(&stored)), &seeded());
        assert_eq!(outcome, Outcome::Accept);
    }

    #[test]
    fn other_requests_pass_unchanged() {
        let cluster = seeded();
        assert_eq!(
            evaluate(&request("DELETE", &crr(), None), &cluster),
            Outcome::Accept
        );
        let mut other = request("CREATE", &crr(), None);
        other.kind.kind = "CloneSet".to_owned();
        assert_eq!(evaluate(&other, &cluster), Outcome::Accept);
        let mut status = request("UPDATE", &crr(), Some(&json!({})));
        status.sub_resource = "status".to_owned();
        assert_eq!(evaluate(&status, &cluster), Outcome::Accept);
        assert!(cluster.reads.borrow().is_empty());
    }

    #[test]
    fn a_payload_that_is_not_a_request_is_a_bad_request() {
        let answer = validate_payload(b"{\"request\": 1}", &seeded()).unwrap();
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(
            (answer["accepted"].as_bool(), answer["code"].as_u64()),
            (Some(false), Some(400))
        );
    }
}
