//! The host capabilities a policy may call (spec §1.7): who may call what,
//! and how they are answered.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::runtime::RuntimeFlavor;

use crate::cluster_fixtures::{ClusterReads, GetRequest, ListRequest};
use crate::runtime::HostCalls;

/// A Kubernetes kind a policy may read (`contextAwareResources`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextAwareResource {
    pub api_version: String,
    pub kind: String,
}

/// What one policy has been granted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Grants {
    /// `hostCapabilities` patterns: `*`, `oci/*`, `oci/v1/*` or exact
    /// paths like `kubernetes/can_i`. Empty denies everything.
    pub host_capabilities: Vec<String>,
    pub context_aware_resources: Vec<ContextAwareResource>,
}

impl Grants {
    /// `kwctl run` on a plain module: every capability, no Kubernetes kind
    /// (it has no `--allow-context-aware`).
    pub fn kwctl_run() -> Self {
        Self {
            host_capabilities: vec!["*".to_owned()],
            context_aware_resources: Vec::new(),
        }
    }

    /// A wildcard stands only for whole trailing segments (`oci/*` covers
    /// `oci/v1/verify`, `oc*` covers nothing).
    pub fn allows_capability(&self, path: &str) -> bool {
        self.host_capabilities
            .iter()
            .any(|pattern| match pattern.strip_suffix('*') {
                Some("") => true,
                Some(prefix) if prefix.ends_with('/') => path.starts_with(prefix),
                Some(_) => false,
                None => pattern == path,
            })
    }

    pub fn allows_resource(&self, api_version: &str, kind: &str) -> bool {
        self.context_aware_resources
            .iter()
            .any(|r| r.api_version == api_version && r.kind == kind)
    }
}

/// The host calls of a policy: the access checks and texts of
/// policy-server, `tracing/log` served, the Kubernetes reads answered from
/// the cluster (live watch caches or fixtures) if there is one, everything
/// else unavailable.
#[derive(Debug, Clone)]
pub struct PolicyHost {
    pub policy_id: String,
    pub grants: Grants,
    pub cluster: Option<Arc<dyn ClusterReads>>,
}

/// The `kubernetes` host calls that read the cluster.
pub(crate) const KUBERNETES_READS: [&str; 3] = [
    "list_resources_by_namespace",
    "list_resources_all",
    "get_resource",
];

#[derive(Deserialize)]
struct ResourceRequest {
    api_version: String,
    kind: String,
}

impl HostCalls for PolicyHost {
    fn host_call(
        &self,
        binding: &str,
        namespace: &str,
        operation: &str,
        payload: &[u8],
    ) -> Result<Vec<u8>, String> {
        if binding != "kubewarden" {
            return Err(format!("unknown binding: {binding}"));
        }
        if (namespace, operation) == ("tracing", "log") {
            // Always succeeds; a policy's logs go to our stderr.
            eprintln!(
                "policy {}: {}",
                self.policy_id,
                String::from_utf8_lossy(payload)
            );
            return Ok(Vec::new());
        }
        let path = format!("{namespace}/{operation}");
        if !self.grants.allows_capability(&path) {
            return Err(format!(
                "Policy has not been granted access to the '{path}' host capability. The violation has been reported."
            ));
        }
        match namespace {
            // Not subject to contextAwareResources, as in policy-server.
            "kubernetes" if operation == "can_i" => {
                let Some(cluster) = &self.cluster else {
                    return Err(
                        "cannot serve kubernetes/can_i: this host has no Kubernetes cluster"
                            .to_owned(),
                    );
                };
                let request: Value = serde_json::from_slice(payload)
                    .map_err(|e| format!("cannot read the can_i request: {e}"))?;
                let answer = off_the_server_thread(|| cluster.can_i(&request))?;
                serde_json::to_vec(&answer).map_err(|e| e.to_string())
            }
            "kubernetes" if KUBERNETES_READS.contains(&operation) => {
                let asked: ResourceRequest = serde_json::from_slice(payload)
                    .map_err(|e| format!("cannot read the {operation} request: {e}"))?;
                if !self.grants.allows_resource(&asked.api_version, &asked.kind) {
                    return Err(format!(
                        "Policy has not been granted access to Kubernetes {}/{} resources. The violation has been reported.",
                        asked.api_version, asked.kind
                    ));
                }
                let Some(cluster) = &self.cluster else {
                    return Err(format!(
                        "cannot serve kubernetes/{operation}: this host has no Kubernetes cluster"
                    ));
                };
                read_cluster(cluster.as_ref(), operation, payload)
            }
            "kubernetes" | "tracing" => Err(format!("unknown operation: {operation}")),
            // policy-server's other namespaces: this host serves none of them.
            "oci" | "net" | "crypto" => {
                Err(format!("cannot serve {path}: not available on this host"))
            }
            _ => Err(format!("unknown namespace: {namespace}")),
        }
    }

    fn console_log(&self, message: &str) {
        eprintln!("policy {}: {message}", self.policy_id);
    }
}

/// Runs a host call that waits on the API server (`can_i` creates a
/// SubjectAccessReview, up to seconds with a slow authorizer). The guest
/// runs on a server thread, with other requests' tasks queued behind it:
/// on a multi-thread runtime they move to another thread while this one
/// waits. Elsewhere (the CLI, a current-thread runtime) the call just runs.
fn off_the_server_thread<T>(call: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(call)
        }
        _ => call(),
    }
}

/// One of the three Kubernetes reads, once access has been checked.
fn read_cluster(
    cluster: &dyn ClusterReads,
    operation: &str,
    payload: &[u8],
) -> Result<Vec<u8>, String> {
    let unreadable = |e: serde_json::Error| format!("cannot read the {operation} request: {e}");
    if operation == "get_resource" {
        cluster.get(&serde_json::from_slice::<GetRequest>(payload).map_err(unreadable)?)
    } else {
        let request: ListRequest = serde_json::from_slice(payload).map_err(unreadable)?;
        if operation == "list_resources_by_namespace" && request.namespace.is_none() {
            return Err("list_resources_by_namespace needs a namespace".to_owned());
        }
        // list_resources_all ignores a stray namespace, as policy-server does.
        let request = ListRequest {
            namespace: request
                .namespace
                .filter(|_| operation != "list_resources_all"),
            ..request
        };
        cluster.list(&request)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::cluster_fixtures::ClusterFixtures;

    fn host(capabilities: &[&str], resources: &[(&str, &str)]) -> PolicyHost {
        PolicyHost {
            policy_id: "p".to_owned(),
            grants: Grants {
                host_capabilities: capabilities.iter().map(|s| (*s).to_owned()).collect(),
                context_aware_resources: resources
                    .iter()
                    .map(|(a, k)| ContextAwareResource {
                        api_version: (*a).to_owned(),
                        kind: (*k).to_owned(),
                    })
                    .collect(),
            },
            cluster: None,
        }
    }

    #[test]
    fn wildcards_cover_whole_segments_only() {
        let grants = host(&["oci/*", "net/v1/*", "kubernetes/can_i"], &[]).grants;
        assert!(grants.allows_capability("oci/v2/verify"));
        assert!(grants.allows_capability("net/v1/dns_lookup_host"));
        assert!(grants.allows_capability("kubernetes/can_i"));
        assert!(!grants.allows_capability("kubernetes/get_resource"));
        assert!(!grants.allows_capability("ocix/v1/verify"));
        assert!(
            !host(&["oc*"], &[])
                .grants
                .allows_capability("oci/v1/verify")
        );
        assert!(
            host(&["*"], &[])
                .grants
                .allows_capability("anything/at/all")
        );
        assert!(
            !Grants::default().allows_capability("oci/v1/verify"),
            "empty denies all"
        );
    }

    #[test]
    fn logging_always_succeeds_and_bindings_are_checked() {
        let host = host(&[], &[]);
        assert_eq!(
            host.host_call("kubewarden", "tracing", "log", b"{}"),
            Ok(Vec::new())
        );
        assert_eq!(
            host.host_call("other", "tracing", "log", b"{}"),
            Err("unknown binding: other".to_owned())
        );
    }

    #[test]
    fn capabilities_are_checked_before_the_operation_is_known() {
        let error = host(&["oci/*"], &[])
            .host_call("kubewarden", "kubernetes", "nonsense", b"")
            .unwrap_err();
        assert_eq!(
            error,
            "Policy has not been granted access to the 'kubernetes/nonsense' host capability. The violation has been reported."
        );
    }

    #[test]
    fn kubernetes_reads_need_the_kind_granted() {
        let payload =
            br#"{"api_version":"v1","kind":"Namespace","name":"default","disable_cache":false}"#;
        let denied =
            host(&["*"], &[]).host_call("kubewarden", "kubernetes", "get_resource", payload);
        assert_eq!(
            denied.unwrap_err(),
            "Policy has not been granted access to Kubernetes v1/Namespace resources. The violation has been reported."
        );
        let granted = host(&["*"], &[("v1", "Namespace")]).host_call(
            "kubewarden",
            "kubernetes",
            "get_resource",
            payload,
        );
        assert!(granted.unwrap_err().contains("no Kubernetes cluster"));
        let with_fixtures = PolicyHost {
            cluster: Some(Arc::new(
                ClusterFixtures::from_yaml(
                    "- {apiVersion: v1, kind: Namespace, metadata: {name: default}}",
                )
                .unwrap(),
            )),
            ..host(&["kubernetes/get_resource"], &[("v1", "Namespace")])
        };
        let answer = with_fixtures
            .host_call("kubewarden", "kubernetes", "get_resource", payload)
            .unwrap();
        let object: serde_json::Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(object["metadata"]["name"], "default");
        assert_eq!(
            with_fixtures
                .host_call("kubewarden", "kubernetes", "list_resources_all", payload)
                .unwrap_err(),
            "Policy has not been granted access to the 'kubernetes/list_resources_all' host capability. The violation has been reported."
        );
        let everything = host(&["*"], &[]);
        let unknown = everything.host_call("kubewarden", "nope", "x", b"");
        assert_eq!(unknown.unwrap_err(), "unknown namespace: nope");
        for namespace in ["kubernetes", "tracing"] {
            let unknown = everything.host_call("kubewarden", namespace, "nonsense", b"");
            assert_eq!(unknown.unwrap_err(), "unknown operation: nonsense");
        }
        let unserved = everything.host_call("kubewarden", "oci", "v1/manifest_digest", b"");
        assert_eq!(
            unserved.unwrap_err(),
            "cannot serve oci/v1/manifest_digest: not available on this host"
        );
    }
}
