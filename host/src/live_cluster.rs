//! The Kubernetes reads of a live cluster, served from watch caches: one
//! reflector per kind some policy may read (its contextAwareResources).
//! Each watch event refreshes that kind's snapshot; a request only reads a
//! snapshot and never calls the API.
//!
//! The caches fill after the host has started serving, not before: listing
//! our own kinds may need the CRDs' conversion webhook, which is this host
//! (a SidecarSet is stored as v1beta1 and the policies read v1alpha1).
//! Waiting for the caches before serving deadlocked every start with such
//! an object stored, on the dev cluster and in a Deployment alike.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Config, ResourceExt as _};
use serde_json::Value;

use crate::capabilities::ContextAwareResource;
use crate::cluster_fixtures::{
    ClusterReads, GetRequest, ListRequest, StoredObject, get_of, list_of,
};

/// A kind's objects, `None` until its first list is in.
type Snapshot = Arc<RwLock<Option<Arc<Vec<StoredObject>>>>>;

/// Watch caches of a cluster. Dropping it stops the watches.
pub struct LiveCluster {
    snapshots: BTreeMap<(String, String), Snapshot>,
    /// Becomes true once every kind's first list is in, and stays true.
    synced: tokio::sync::watch::Receiver<bool>,
    client: Client,
    /// The watches run here, apart from the server's runtime.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for LiveCluster {
    /// The last policy may let go of the cache on an async thread, where
    /// a blocking runtime shutdown is not allowed.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl std::fmt::Debug for LiveCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveCluster")
            .field("kinds", &self.snapshots.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Where the cluster's credentials come from.
#[derive(Debug, Clone, Copy)]
pub enum Credentials<'a> {
    Kubeconfig(&'a Path),
    InCluster,
}

impl LiveCluster {
    /// Connects and starts a watch per kind, without waiting for them to
    /// fill ([`LiveCluster::synced`] says when they have). Fails when the
    /// API server cannot be reached or does not know a kind.
    pub fn connect(
        credentials: Credentials<'_>,
        kinds: &[ContextAwareResource],
    ) -> Result<Self, String> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("kruise-wasm-watch")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the watch runtime: {e}"))?;
        let (client, snapshots, synced) = runtime.block_on(async {
            let client = client(credentials).await?;
            let mut snapshots = BTreeMap::new();
            let mut first_lists = Vec::new();
            for kind in kinds {
                let key = (kind.api_version.clone(), kind.kind.clone());
                if snapshots.contains_key(&key) {
                    continue;
                }
                let (snapshot, listed) = watch(client.clone(), kind).await?;
                snapshots.insert(key, snapshot);
                first_lists.push(listed);
            }
            let (synced_tx, synced) = tokio::sync::watch::channel(first_lists.is_empty());
            tokio::spawn(async move {
                for listed in first_lists {
                    // A watch task only ends with the runtime.
                    if listed.await.is_err() {
                        return;
                    }
                }
                tracing::info!("the watch caches hold the cluster's objects");
                synced_tx.send_replace(true);
            });
            Ok::<_, String>((client, snapshots, synced))
        })?;
        Ok(Self {
            snapshots,
            synced,
            client,
            runtime: Some(runtime),
        })
    }

    /// Blocks until every watch cache holds the cluster's objects, at most
    /// `timeout`: for callers that need the cluster's state at once (the
    /// bench, tests); the server waits per request instead.
    pub fn wait_synced(&self, timeout: Duration) -> Result<(), String> {
        let runtime = self
            .runtime
            .as_ref()
            .ok_or_else(|| "the watch runtime has stopped".to_owned())?;
        let mut synced = self.synced.clone();
        runtime
            .block_on(async {
                tokio::time::timeout(timeout, synced.wait_for(|synced| *synced)).await
            })
            .map_err(|_| {
                format!(
                    "the watch caches did not fill within {} s",
                    timeout.as_secs()
                )
            })?
            .map(drop)
            .map_err(|_| "the watches stopped".to_owned())
    }

    fn snapshot(&self, api_version: &str, kind: &str) -> Result<Arc<Vec<StoredObject>>, String> {
        let snapshot = self
            .snapshots
            .get(&(api_version.to_owned(), kind.to_owned()))
            .ok_or_else(|| format!("{api_version} {kind} is not watched by this host"))?;
        let guard = snapshot
            .read()
            .map_err(|_| "a watch cache is poisoned".to_owned())?;
        guard.as_ref().map(Arc::clone).ok_or_else(|| {
            format!("the host's watch cache of {api_version} {kind} has not been filled yet")
        })
    }
}

impl ClusterReads for LiveCluster {
    fn synced(&self) -> Option<tokio::sync::watch::Receiver<bool>> {
        Some(self.synced.clone())
    }

    fn list(&self, request: &ListRequest) -> Result<Vec<u8>, String> {
        list_of(
            &self.snapshot(&request.api_version, &request.kind)?,
            request,
        )
    }

    fn get(&self, request: &GetRequest) -> Result<Vec<u8>, String> {
        get_of(
            &self.snapshot(&request.api_version, &request.kind)?,
            request,
        )
    }

    /// A SubjectAccessReview, asked of the API server each time (answers
    /// follow RBAC as it changes).
    fn can_i(&self, request: &Value) -> Result<Value, String> {
        let review = review_from(request)?;
        let runtime = self
            .runtime
            .as_ref()
            .ok_or_else(|| "the watch runtime has stopped".to_owned())?;
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        // Host calls are synchronous and may come from a server thread that
        // is driving futures, where `block_on` is refused: the request runs
        // on the watch runtime and this thread waits on a channel.
        let (answer_tx, answer_rx) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            let _ = answer_tx.send(api.create(&PostParams::default(), &review).await);
        });
        let answer = answer_rx
            .recv_timeout(CAN_I_TIMEOUT)
            .map_err(|_| {
                format!(
                    "SubjectAccessReview failed: no answer within {} s",
                    CAN_I_TIMEOUT.as_secs()
                )
            })?
            .map_err(|e| format!("SubjectAccessReview failed: {e}"))?;
        serde_json::to_value(answer.status.unwrap_or_default()).map_err(|e| e.to_string())
    }
}

/// How long a guest waits for the API server's SubjectAccessReview.
const CAN_I_TIMEOUT: Duration = Duration::from_secs(5);

/// The SDK's `can_i` payload (snake_case) as a SubjectAccessReview.
fn review_from(request: &Value) -> Result<SubjectAccessReview, String> {
    let asked = &request["subject_access_review"];
    if !asked.is_object() {
        return Err("the can_i request has no subject_access_review".to_owned());
    }
    let attributes = &asked["resource_attributes"];
    let field = |name: &str| attributes[name].as_str().map(str::to_owned);
    let review = serde_json::json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": asked["user"],
            "groups": asked["groups"],
            "resourceAttributes": {
                "group": field("group"),
                "name": field("name"),
                "namespace": field("namespace"),
                "resource": field("resource"),
                "subresource": field("subresource"),
                "verb": field("verb"),
                "version": field("version"),
            },
        },
    });
    serde_json::from_value(review).map_err(|e| format!("cannot read the can_i request: {e}"))
}

pub(crate) async fn client(credentials: Credentials<'_>) -> Result<Client, String> {
    let config = match credentials {
        Credentials::Kubeconfig(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?
        }
        Credentials::InCluster => {
            Config::incluster().map_err(|e| format!("in-cluster configuration: {e}"))?
        }
    };
    Client::try_from(config).map_err(|e| format!("cannot build a Kubernetes client: {e}"))
}

/// Starts the watch of one kind; the receiver fires once the first list
/// is in the cache.
async fn watch(
    client: Client,
    kind: &ContextAwareResource,
) -> Result<(Snapshot, tokio::sync::oneshot::Receiver<()>), String> {
    let (group, version) = kind
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", kind.api_version.as_str()));
    let gvk = GroupVersionKind::gvk(group, version, &kind.kind);
    let (resource, _) = kube::discovery::pinned_kind(&client, &gvk)
        .await
        .map_err(|e| format!("cannot watch {} {}: {e}", kind.api_version, kind.kind))?;
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let writer = reflector::store::Writer::new(resource.clone());
    let reader = writer.as_reader();
    let snapshot: Snapshot = Arc::default();
    let (listed_tx, listed_rx) = tokio::sync::oneshot::channel();
    let target = Arc::clone(&snapshot);
    tokio::spawn(async move {
        let mut listed_tx = Some(listed_tx);
        // Without managedFields, as policy-server's caches hold them: the
        // same objects reach the policies, and each list answer a guest
        // reads is a third of the size.
        let objects = watcher(api, watcher::Config::default())
            .modify(|object| object.managed_fields_mut().clear());
        let events = reflector::reflector(writer, objects).default_backoff();
        futures::pin_mut!(events);
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => continue,
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, kind = %resource.kind, "watch error; retrying");
                    continue;
                }
            }
            let objects = stored_objects(&reader.state(), &resource);
            if let Ok(mut guard) = target.write() {
                *guard = Some(Arc::new(objects));
            }
            if let Some(tx) = listed_tx.take() {
                let _ = tx.send(());
            }
        }
    });
    Ok((snapshot, listed_rx))
}

/// The cached objects as the API would list them: with apiVersion and
/// kind, sorted by namespace and name.
fn stored_objects(objects: &[Arc<DynamicObject>], resource: &ApiResource) -> Vec<StoredObject> {
    let mut values: Vec<Value> = objects
        .iter()
        .filter_map(|object| serde_json::to_value(object.as_ref()).ok())
        .map(|mut value| {
            if let Some(map) = value.as_object_mut() {
                map.insert(
                    "apiVersion".to_owned(),
                    Value::from(resource.api_version.clone()),
                );
                map.insert("kind".to_owned(), Value::from(resource.kind.clone()));
            }
            value
        })
        .collect();
    let key = |v: &Value| {
        (
            v["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            v["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        )
    };
    values.sort_by_key(key);
    values
        .into_iter()
        .filter_map(|value| StoredObject::new(value).ok())
        .collect()
}
