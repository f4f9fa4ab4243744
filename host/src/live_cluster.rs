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

use std::collections::{BTreeMap, HashMap, btree_map};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::watcher::ExponentialBackoff;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Config, ResourceExt as _};
use serde_json::Value;
use tokio::sync::watch;

use crate::capabilities::ContextAwareResource;
use crate::cluster_fixtures::{
    ClusterReads, GetRequest, ListRequest, StoredObject, get_of, list_of,
};

/// A kind's objects as its watch publishes them. The watch task holds the
/// sending side: when it ends, the cache says its watch has stopped.
#[derive(Debug, Default)]
struct KindCache {
    /// `None` until the first list is in.
    objects: Option<Arc<Vec<Arc<StoredObject>>>>,
    /// The last watch error before the first list: why it is not in.
    last_error: Option<String>,
}

/// Watch caches of a cluster. Dropping it stops the watches.
pub struct LiveCluster {
    caches: BTreeMap<(String, String), watch::Receiver<KindCache>>,
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
            .field("kinds", &self.caches.keys().collect::<Vec<_>>())
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
    /// fill ([`ClusterReads::cache_filled`] says when each has). Fails
    /// when the API server cannot be reached or does not know a kind.
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
        let (client, caches) = runtime.block_on(async {
            let client = client(credentials).await?;
            let mut caches = BTreeMap::new();
            for kind in kinds {
                let key = (kind.api_version.clone(), kind.kind.clone());
                if let btree_map::Entry::Vacant(entry) = caches.entry(key) {
                    entry.insert(watch_kind(client.clone(), kind).await?);
                }
            }
            Ok::<_, String>((client, caches))
        })?;
        Ok(Self {
            caches,
            client,
            runtime: Some(runtime),
        })
    }

    /// Blocks until every watch cache holds the cluster's objects, at most
    /// `timeout`: for callers that need the cluster's state at once (the
    /// bench, tests); the server waits per request instead.
    pub fn wait_filled(&self, timeout: Duration) -> Result<(), String> {
        let runtime = self
            .runtime
            .as_ref()
            .ok_or_else(|| "the watch runtime has stopped".to_owned())?;
        runtime.block_on(async {
            let deadline = tokio::time::Instant::now() + timeout;
            for (api_version, kind) in self.caches.keys() {
                let filling = self.until_filled(api_version, kind);
                // Past the deadline, the next kinds are only checked.
                let _ = tokio::time::timeout_at(deadline, filling).await;
            }
        });
        for (api_version, kind) in self.caches.keys() {
            self.cache_filled(api_version, kind)?;
        }
        Ok(())
    }

    fn snapshot(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<Arc<Vec<Arc<StoredObject>>>, String> {
        let cache = self
            .caches
            .get(&(api_version.to_owned(), kind.to_owned()))
            .ok_or_else(|| format!("{api_version} {kind} is not watched by this host"))?;
        if cache.has_changed().is_err() {
            return Err(format!(
                "the host's watch of {api_version} {kind} has stopped"
            ));
        }
        let cache = cache.borrow();
        match (&cache.objects, &cache.last_error) {
            (Some(objects), _) => Ok(Arc::clone(objects)),
            (None, None) => Err(format!(
                "the host's watch cache of {api_version} {kind} has not filled yet"
            )),
            (None, Some(error)) => Err(format!(
                "the host's watch cache of {api_version} {kind} has not filled yet \
                 (last watch error: {error})"
            )),
        }
    }
}

impl ClusterReads for LiveCluster {
    fn cache_filled(&self, api_version: &str, kind: &str) -> Result<(), String> {
        self.snapshot(api_version, kind).map(drop)
    }

    fn until_filled(&self, api_version: &str, kind: &str) -> BoxFuture<'static, ()> {
        let cache = self
            .caches
            .get(&(api_version.to_owned(), kind.to_owned()))
            .cloned();
        Box::pin(async move {
            if let Some(mut cache) = cache {
                // An error means the watch has stopped: nothing to wait for.
                let _ = cache.wait_for(|cache| cache.objects.is_some()).await;
            }
        })
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

/// How a watch retries after an error. Before a kind's first list, the
/// errors are mostly the host's own conversion webhook not serving yet
/// (see the module's comment): kube's default backoff would grow to 30 s
/// and leave the caches empty long after the host serves, so this one
/// stops growing at 2 s. A host watches a handful of kinds, so the API
/// server sees at most a few retries a second.
fn retry_backoff() -> ResetTimerBackoff<ExponentialBackoff> {
    ResetTimerBackoff::new(
        ExponentialBackoff::from(
            backon::ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(100))
                .with_max_delay(Duration::from_secs(2))
                .with_factor(2.0)
                .with_jitter()
                .without_max_times(),
        ),
        Duration::from_mins(2),
    )
}

/// Starts the watch of one kind; its cache fills in the background.
async fn watch_kind(
    client: Client,
    kind: &ContextAwareResource,
) -> Result<watch::Receiver<KindCache>, String> {
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
    let (cache, filled) = watch::channel(KindCache::default());
    tokio::spawn(async move {
        // Without managedFields, as policy-server's caches hold them: the
        // same objects reach the policies, and each list answer a guest
        // reads is a third of the size.
        let objects = watcher(api, watcher::Config::default())
            .modify(|object| object.managed_fields_mut().clear());
        let events = reflector::reflector(writer, objects).backoff(retry_backoff());
        futures::pin_mut!(events);
        let mut written = HashMap::new();
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => continue,
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, kind = %resource.kind, "watch error; retrying");
                    cache.send_modify(|cache| {
                        if cache.objects.is_none() {
                            cache.last_error = Some(error.to_string());
                        }
                    });
                    continue;
                }
            }
            let objects = stored_objects(&reader.state(), &resource, &mut written);
            if cache.borrow().objects.is_none() {
                tracing::info!(
                    api_version = %resource.api_version,
                    kind = %resource.kind,
                    objects = objects.len(),
                    "watch cache filled"
                );
            }
            cache.send_replace(KindCache {
                objects: Some(Arc::new(objects)),
                last_error: None,
            });
        }
    });
    Ok(filled)
}

/// Where an object's JSON text was written for: its uid and
/// resourceVersion, which change whenever its content does.
type Written = HashMap<(String, String), Arc<StoredObject>>;

/// The cached objects as the API would list them: with apiVersion and
/// kind, sorted by namespace and name. An object unchanged since the last
/// event keeps its text (`written`, updated here): a watch event writes
/// out only the objects it changed.
fn stored_objects(
    objects: &[Arc<DynamicObject>],
    resource: &ApiResource,
    written: &mut Written,
) -> Vec<Arc<StoredObject>> {
    let mut previous = std::mem::take(written);
    let mut stored: Vec<Arc<StoredObject>> = objects
        .iter()
        .filter_map(|object| {
            let version = object.uid().zip(object.resource_version());
            let text = match version.as_ref().and_then(|v| previous.remove(v)) {
                Some(text) => text,
                None => Arc::new(stored_object(object, resource)?),
            };
            if let Some(version) = version {
                written.insert(version, Arc::clone(&text));
            }
            Some(text)
        })
        .collect();
    stored.sort_by(|a, b| a.list_position().cmp(&b.list_position()));
    stored
}

/// One object as the API lists it, with its apiVersion and kind.
fn stored_object(object: &DynamicObject, resource: &ApiResource) -> Option<StoredObject> {
    let mut document = serde_json::to_value(object).ok()?;
    let map = document.as_object_mut()?;
    map.insert(
        "apiVersion".to_owned(),
        Value::from(resource.api_version.clone()),
    );
    map.insert("kind".to_owned(), Value::from(resource.kind.clone()));
    StoredObject::new(&document).ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pod(namespace: &str, name: &str, resource_version: &str) -> Arc<DynamicObject> {
        let object = serde_json::json!({
            "metadata": {"namespace": namespace, "name": name, "uid": format!("uid-{name}"),
                         "resourceVersion": resource_version},
        });
        Arc::new(serde_json::from_value(object).unwrap())
    }

    fn texts(stored: &[Arc<StoredObject>]) -> Vec<Value> {
        let answer = crate::cluster_fixtures::list_of(
            stored,
            &ListRequest {
                api_version: "v1".to_owned(),
                kind: "Pod".to_owned(),
                namespace: None,
                label_selector: None,
                field_selector: None,
            },
        )
        .unwrap();
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        answer["items"].as_array().unwrap().clone()
    }

    /// Each watch event writes out only the objects it changed: one whose
    /// resourceVersion is unchanged keeps the text written before.
    #[test]
    fn a_watch_event_writes_only_the_objects_it_changed() {
        let pods = ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
        let mut written = Written::new();
        let first = stored_objects(
            &[pod("b", "web", "1"), pod("a", "db", "1")],
            &pods,
            &mut written,
        );
        let items = texts(&first);
        assert_eq!(items[0]["metadata"]["name"], "db", "sorted by namespace");
        assert_eq!(items[0]["kind"], "Pod");
        assert_eq!(items[0]["apiVersion"], "v1");

        let second = stored_objects(
            &[pod("b", "web", "2"), pod("a", "db", "1")],
            &pods,
            &mut written,
        );
        assert!(Arc::ptr_eq(&first[0], &second[0]), "db is unchanged");
        assert!(!Arc::ptr_eq(&first[1], &second[1]), "web changed");
        assert_eq!(texts(&second)[1]["metadata"]["resourceVersion"], "2");
        assert_eq!(written.len(), 2, "objects gone are forgotten");
    }
}
