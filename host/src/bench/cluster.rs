//! The cluster-mode workload's cluster: the seed SidecarSet stored there,
//! and our server's watch caches of what the sidecarset policy reads.
//! policy-server reads the same cluster through its own host calls.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::{Api, Error};
use serde_json::Value;

use crate::capabilities::ContextAwareResource;
use crate::live_cluster::{Credentials, LiveCluster, client};

/// How long the watch caches may take to hold the cluster's objects.
const CACHE_SYNC: Duration = Duration::from_secs(30);

/// Stores `sidecar_set` in the cluster unless it has a SidecarSet of that
/// name (which is then the one measured), and connects the watch caches of
/// `kinds`.
pub fn connect(
    kubeconfig: &Path,
    sidecar_set: &Value,
    kinds: &[ContextAwareResource],
) -> Result<Arc<LiveCluster>, String> {
    create_if_absent(kubeconfig, sidecar_set)?;
    let live = LiveCluster::connect(Credentials::Kubeconfig(kubeconfig), kinds)?;
    live.wait_filled(CACHE_SYNC)?;
    Ok(Arc::new(live))
}

fn create_if_absent(kubeconfig: &Path, object: &Value) -> Result<(), String> {
    let object: DynamicObject = serde_json::from_value(object.clone())
        .map_err(|e| format!("the bench's SidecarSet: {e}"))?;
    let types = object
        .types
        .as_ref()
        .ok_or("the bench's SidecarSet has no apiVersion and kind")?;
    let kind = GroupVersionKind::try_from(types).map_err(|e| e.to_string())?;
    let name = object.metadata.name.clone().unwrap_or_default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    runtime.block_on(async {
        let client = client(Credentials::Kubeconfig(kubeconfig)).await?;
        let api: Api<DynamicObject> = Api::all_with(client, &ApiResource::from_gvk(&kind));
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => Ok(()),
            Err(Error::Api(status)) if status.code == 409 => Ok(()),
            Err(e) => Err(format!("cannot create {} {name}: {e}", kind.kind)),
        }
    })
}
