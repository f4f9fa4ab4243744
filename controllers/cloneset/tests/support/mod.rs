//! What the CloneSet end-to-end tests share: the examples, a watch that
//! records every pod change, the kubectl columns and waiting for them.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kruise_api::CloneSet;
use kruise_devcluster::watch::PodCounts;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

pub fn example(name: &str) -> CloneSet {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../policies/fixtures/examples")
        .join(name);
    serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

pub use kruise_core::cloneset::has_ready_condition as ready;

/// The pods with `app=<app>` in `default`, by name.
pub async fn pods_by_name(client: &Client, app: &str) -> BTreeMap<String, Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| (p.name_any(), p))
        .collect()
}

/// Every pod state the API server shows, as (active pods, ready pods).
pub fn record(client: &Client, selector: &str) -> PodCounts {
    PodCounts::start(client, selector, ready)
}

/// DESIRED UPDATED UPDATED_READY READY TOTAL, as `kubectl get clone` shows.
pub fn columns(cloneset: &CloneSet) -> [i32; 5] {
    let status = cloneset.status.clone().unwrap_or_default();
    [
        cloneset.spec.replicas.unwrap_or(1),
        status.updated_replicas,
        status.updated_ready_replicas,
        status.ready_replicas,
        status.replicas,
    ]
}

pub async fn wait_for_columns(api: &Api<CloneSet>, name: &str, want: [i32; 5]) -> CloneSet {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let cloneset = api.get(name).await.unwrap();
        let generation_seen = cloneset.status.as_ref().and_then(|s| s.observed_generation)
            == cloneset.metadata.generation;
        if generation_seen && columns(&cloneset) == want {
            return cloneset;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: wanted {want:?}, still {:?}: {:#?}",
            columns(&cloneset),
            cloneset.status
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let output = Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub async fn set_image(api: &Api<CloneSet>, name: &str, image: &str) {
    let patch =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": image}]}}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}
