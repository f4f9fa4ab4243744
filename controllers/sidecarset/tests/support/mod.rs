//! Shared pieces of the end-to-end tests: the dev environment with the
//! controller running, kubectl, example objects, waiting, and a complete
//! recorded history of the pods (every version the API server stored, as
//! seen by a watch) to check invariants that hold at every moment.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kruise_api::SidecarSet;
use kruise_api::sidecarset::SidecarSetStatus;
use kruise_controller_runtime::shared::SharedWatches;
use kruise_manager::dev::{DevEnvironment, DevOptions};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

pub const READY_AFTER: &str = "devcluster.kruise.io/ready-after-seconds";

pub struct Env {
    pub dev: DevEnvironment,
    pub client: Client,
    pub kubeconfig: PathBuf,
    pub controller: JoinHandle<()>,
}

impl Env {
    pub async fn start() -> Self {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "kruise_sidecarset_controller=info".into()),
            )
            .with_test_writer()
            .try_init();
        // This test runs (and restarts) its own SidecarSet controller.
        let options = DevOptions {
            run_controllers: false,
            ..DevOptions::default()
        };
        let dev = DevEnvironment::start(options).await.unwrap();
        let client = dev.client();
        let kubeconfig = dev.kubeconfig().to_path_buf();
        let controller = tokio::spawn(kruise_sidecarset_controller::run(
            client.clone(),
            SharedWatches::new(client.clone()),
        ));
        Self {
            dev,
            client,
            kubeconfig,
            controller,
        }
    }

    /// Stops the controller and starts a fresh one (no memory of the old).
    pub fn restart_controller(&mut self) {
        self.controller.abort();
        self.controller = tokio::spawn(kruise_sidecarset_controller::run(
            self.client.clone(),
            SharedWatches::new(self.client.clone()),
        ));
    }

    pub fn kubectl(&self, args: &[&str]) -> String {
        kubectl(&self.kubeconfig, args)
    }

    /// MATCHED, UPDATED, READY as `kubectl get sidecarset` prints them.
    pub fn printed_columns(&self, name: &str) -> Vec<String> {
        let out = self.kubectl(&["get", "sidecarset", name]);
        let mut lines = out.lines();
        let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(header, ["NAME", "MATCHED", "UPDATED", "READY", "AGE"]);
        let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(row[0], name);
        row[1..4].iter().map(|s| (*s).to_owned()).collect()
    }

    pub fn sidecar_sets(&self) -> Api<SidecarSet> {
        Api::all(self.client.clone())
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), "default")
    }

    pub async fn status(&self, name: &str) -> Option<SidecarSetStatus> {
        self.sidecar_sets().get(name).await.unwrap().status
    }

    /// Creates the SidecarSet and waits until the webhook host injects it.
    pub async fn create_sidecar_set(&self, set: &SidecarSet, probe_labels: &[(&str, &str)]) {
        self.sidecar_sets()
            .create(&PostParams::default(), set)
            .await
            .unwrap();
        self.wait_until_injecting(probe_labels).await;
    }

    /// The host reads SidecarSets from a watch cache: dry-run a pod with
    /// these labels until it comes back injected.
    pub async fn wait_until_injecting(&self, labels: &[(&str, &str)]) {
        let probe = pod("injection-probe", labels, None);
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        wait_for("the SidecarSet reaches the webhook host", 30, || async {
            let created = self.pods().create(&dry_run, &probe).await.unwrap();
            created.spec.unwrap().containers.len() > 1
        })
        .await;
    }

    pub async fn patch_sidecar_set(&self, name: &str, patch: Value) {
        self.sidecar_sets()
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
    }

    /// JSON patch on the SidecarSet with kubectl, as a user would.
    pub fn kubectl_json_patch(&self, name: &str, patch: &Value) {
        self.kubectl(&[
            "patch",
            "sidecarset",
            name,
            "--type=json",
            "-p",
            &patch.to_string(),
        ]);
    }

    pub async fn list(&self, selector: &str) -> Vec<Pod> {
        self.pods()
            .list(&kube::api::ListParams::default().labels(selector))
            .await
            .unwrap()
            .items
    }

    pub async fn wait_status(&self, name: &str, want: [i32; 4], seconds: u64) {
        wait_for(
            &format!("SidecarSet {name} status matched/updated/ready/updatedReady = {want:?}"),
            seconds,
            || async {
                let set = self.sidecar_sets().get(name).await.unwrap();
                let generation = set.metadata.generation;
                set.status.is_some_and(|s| {
                    s.observed_generation == generation
                        && [
                            s.matched_pods,
                            s.updated_pods,
                            s.ready_pods,
                            s.updated_ready_pods,
                        ] == want
                })
            },
        )
        .await;
    }
}

pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let output = Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs");
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn example_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../policies/fixtures/examples")
        .join(name)
}

pub fn example<T: serde::de::DeserializeOwned>(name: &str) -> T {
    serde_yaml::from_str(&std::fs::read_to_string(example_path(name)).unwrap()).unwrap()
}

/// A one-container app pod in `default`; containers turn ready
/// `ready_after` seconds after they (re)start.
pub fn pod(name: &str, labels: &[(&str, &str)], ready_after: Option<u32>) -> Pod {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    let mut annotations = BTreeMap::new();
    if let Some(seconds) = ready_after {
        annotations.insert(READY_AFTER, seconds.to_string());
    }
    serde_json::from_value(json!({
        "metadata": {
            "name": name, "namespace": "default",
            "labels": labels, "annotations": annotations,
        },
        "spec": {"containers": [{"name": "app", "image": "nginx:1.7.9"}]},
    }))
    .unwrap()
}

pub async fn wait_for<F, Fut>(what: &str, seconds: u64, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        if check().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub fn container_image<'a>(pod: &'a Pod, name: &str) -> Option<&'a str> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == name)?
        .image
        .as_deref()
}

#[allow(unused_imports)] // each test binary uses its own part of this module
pub use kruise_core::cloneset::{
    condition, container_status as status_of, has_ready_condition as is_ready,
};

/// Ready, and every container runs the image its spec names and is ready.
pub fn is_available(pod: &Pod) -> bool {
    is_ready(pod)
        && pod.spec.as_ref().is_some_and(|spec| {
            spec.containers.iter().all(|c| {
                status_of(pod, &c.name)
                    .is_some_and(|s| s.ready && Some(s.image.as_str()) == c.image.as_deref())
            })
        })
}

pub fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// Every state of the selected pods: after each watch event, a snapshot of
/// all of them (name → pod).
pub struct History {
    snapshots: Arc<Mutex<Vec<BTreeMap<String, Pod>>>>,
    task: JoinHandle<()>,
}

impl History {
    pub async fn start(client: &Client, selector: &str) -> Self {
        let snapshots = Arc::new(Mutex::new(Vec::new()));
        let recorded = snapshots.clone();
        let api: Api<Pod> = Api::namespaced(client.clone(), "default");
        let stream = watcher(api, watcher::Config::default().labels(selector));
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            let mut pods: BTreeMap<String, Pod> = BTreeMap::new();
            let mut listing: Option<BTreeMap<String, Pod>> = None;
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Init) => listing = Some(BTreeMap::new()),
                    Ok(watcher::Event::InitApply(pod)) => {
                        if let Some(listing) = listing.as_mut() {
                            listing.insert(pod.metadata.name.clone().unwrap(), pod);
                        }
                    }
                    Ok(watcher::Event::InitDone) => {
                        pods = listing.take().unwrap_or_default();
                        recorded.lock().unwrap().push(pods.clone());
                    }
                    Ok(watcher::Event::Apply(pod)) => {
                        pods.insert(pod.metadata.name.clone().unwrap(), pod);
                        recorded.lock().unwrap().push(pods.clone());
                    }
                    Ok(watcher::Event::Delete(pod)) => {
                        pods.remove(pod.metadata.name.as_deref().unwrap());
                        recorded.lock().unwrap().push(pods.clone());
                    }
                    Err(_) => {}
                }
            }
        });
        let history = Self { snapshots, task };
        wait_for("the pod history watch starts", 20, || async {
            !history.snapshots.lock().unwrap().is_empty()
        })
        .await;
        history
    }

    pub fn len(&self) -> usize {
        self.snapshots.lock().unwrap().len()
    }

    /// Snapshots from index `from` on.
    pub fn since(&self, from: usize) -> Vec<BTreeMap<String, Pod>> {
        self.snapshots.lock().unwrap()[from..].to_vec()
    }

    pub fn latest(&self) -> BTreeMap<String, Pod> {
        self.snapshots
            .lock()
            .unwrap()
            .last()
            .cloned()
            .unwrap_or_default()
    }
}

impl Drop for History {
    fn drop(&mut self) {
        self.task.abort();
    }
}
