//! The Node objects of the simulated nodes and their heartbeats (a Lease
//! renewed every 10 s, the Ready condition every minute), so the node
//! lifecycle controller never marks them NotReady or evicts their pods.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const LEASE_SECONDS: i32 = 40;
const LEASE_RENEW: Duration = Duration::from_secs(10);
const STATUS_EVERY: u32 = 6;

pub async fn register(client: &kube::Client, name: &str, index: usize) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "devcluster.kruise.io/simulated": "true",
            },
        },
    }))
    .map_err(kube::Error::SerdeError)?;
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => return Err(error),
    }
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(status(name, index)),
        )
        .await?;
    renew_lease(client, name).await
}

/// Renews the lease forever; posts the node status every minute.
pub async fn heartbeat(client: kube::Client, name: String) {
    let nodes: Api<Node> = Api::all(client.clone());
    let index = name
        .rsplit('-')
        .next()
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(1)
        .saturating_sub(1);
    let mut beat = 0u32;
    loop {
        tokio::time::sleep(LEASE_RENEW).await;
        beat = beat.wrapping_add(1);
        if let Err(error) = renew_lease(&client, &name).await {
            tracing::warn!(node = %name, %error, "lease renewal failed");
        }
        if beat.is_multiple_of(STATUS_EVERY) {
            let patch = Patch::Merge(status(&name, index));
            if let Err(error) = nodes
                .patch_status(&name, &PatchParams::default(), &patch)
                .await
            {
                tracing::warn!(node = %name, %error, "node status update failed");
            }
        }
    }
}

async fn renew_lease(client: &kube::Client, name: &str) -> Result<(), kube::Error> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": MicroTime(Timestamp::now()),
        },
    });
    leases
        .patch(
            name,
            &PatchParams::apply("devcluster-simnode").force(),
            &Patch::Apply(lease),
        )
        .await
        .map(|_| ())
}

fn status(name: &str, index: usize) -> Value {
    let now = Timestamp::now().to_string();
    let condition = |kind: &str, status: &str, reason: &str| {
        json!({
            "type": kind, "status": status, "reason": reason,
            "lastHeartbeatTime": now, "lastTransitionTime": now,
        })
    };
    let resources =
        json!({"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "100Gi"});
    json!({
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                condition("Ready", "True", "KubeletReady"),
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": node_ip(index)},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "machineID": name, "systemUUID": name, "bootID": name,
                "kernelVersion": "simulated", "osImage": "simulated",
                "containerRuntimeVersion": "simulated://1.0",
                "kubeletVersion": "v1.37.2-simulated", "kubeProxyVersion": "",
                "operatingSystem": "linux", "architecture": "amd64",
            },
        },
    })
}

pub fn node_ip(index: usize) -> String {
    format!("10.240.0.{}", index % 250 + 2)
}
