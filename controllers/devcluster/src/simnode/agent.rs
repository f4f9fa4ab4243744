//! The kubelet stand-in: watches pods bound to the simulated nodes and
//! writes the status [`super::kubelet::next_status`] decides.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::kubelet::{self, ConfigNeed, OWN_CONDITIONS, Observation};
use super::node::node_ip;

struct Context {
    client: Client,
    /// Node name → its InternalIP.
    nodes: BTreeMap<String, String>,
}

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct AgentError(#[from] kube::Error);

pub async fn run(client: Client, nodes: Vec<String>) {
    let nodes = nodes
        .into_iter()
        .enumerate()
        .map(|(index, name)| (name, node_ip(index)))
        .collect();
    let context = Arc::new(Context {
        client: client.clone(),
        nodes,
    });
    let bound_pods = watcher::Config::default().fields("spec.nodeName!=");
    Controller::new(Api::<Pod>::all(client), bound_pods)
        .run(reconcile, on_error, context)
        .for_each(|_| async {})
        .await;
}

async fn reconcile(pod: Arc<Pod>, context: Arc<Context>) -> Result<Action, AgentError> {
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    let Some(host_ip) = context.nodes.get(&node) else {
        return Ok(Action::await_change());
    };
    let namespace = pod.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(context.client.clone(), &namespace);
    if pod.metadata.deletion_timestamp.is_some() {
        // The containers "stop" at once; kubelet's final delete.
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: pod.uid(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        return match pods.delete(&pod.name_any(), &params).await {
            Ok(_) => Ok(Action::await_change()),
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
                Ok(Action::await_change())
            }
            Err(error) => Err(error.into()),
        };
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return Ok(Action::await_change());
    }
    let needs = pod
        .spec
        .as_ref()
        .map(kubelet::config_needs)
        .unwrap_or_default();
    let observation = Observation {
        now: Timestamp::now(),
        host_ip: host_ip.clone(),
        blocked: blocked_containers(&context.client, &namespace, &needs).await?,
    };
    let next = kubelet::next_status(&pod, &observation);
    if pod.status.as_ref() != Some(&next.status) {
        let mut status = serde_json::to_value(&next.status).map_err(kube::Error::SerdeError)?;
        // Only our conditions: a strategic merge keeps everyone else's.
        if let Some(conditions) = status.get_mut("conditions").and_then(|c| c.as_array_mut()) {
            conditions.retain(|c| {
                c["type"]
                    .as_str()
                    .is_some_and(|t| OWN_CONDITIONS.contains(&t))
            });
        }
        let patch = Patch::Strategic(json!({ "status": status }));
        pods.patch_status(&pod.name_any(), &PatchParams::default(), &patch)
            .await?;
    }
    Ok(next
        .recheck_after
        .map_or_else(Action::await_change, Action::requeue))
}

fn on_error(_pod: Arc<Pod>, error: &AgentError, _context: Arc<Context>) -> Action {
    tracing::debug!(%error, "simulated kubelet: retrying");
    Action::requeue(Duration::from_secs(1))
}

/// The containers whose environment refers to a ConfigMap or key that does
/// not exist, with kubelet's message for each.
async fn blocked_containers(
    client: &Client,
    namespace: &str,
    needs: &[ConfigNeed],
) -> Result<BTreeMap<String, String>, kube::Error> {
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let mut found: BTreeMap<&str, Option<ConfigMap>> = BTreeMap::new();
    let mut blocked = BTreeMap::new();
    for need in needs {
        if !found.contains_key(need.config_map.as_str()) {
            let config_map = config_maps.get_opt(&need.config_map).await?;
            found.insert(&need.config_map, config_map);
        }
        let message = match (
            found.get(need.config_map.as_str()).and_then(Option::as_ref),
            &need.key,
        ) {
            (None, _) => format!("configmap \"{}\" not found", need.config_map),
            (Some(map), Some(key)) if !map.data.as_ref().is_some_and(|d| d.contains_key(key)) => {
                format!(
                    "couldn't find key {key} in ConfigMap {namespace}/{}",
                    need.config_map
                )
            }
            _ => continue,
        };
        blocked.entry(need.container.clone()).or_insert(message);
    }
    Ok(blocked)
}
