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

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::discovery::Scope;
use kube::runtime::utils::{Backoff, ResetTimerBackoff};
use kube::runtime::watcher::{DefaultBackoff, ExponentialBackoff};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Config, ResourceExt as _};
use serde_json::Value;
use tokio::sync::watch;

use crate::capabilities::ContextAwareResource;
use crate::cluster_fixtures::{
    ClusterReads, GetRequest, ListRequest, StoredObject, get_of, list_of, not_namespaced,
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

/// One watched kind and its cache.
struct WatchedKind {
    api_version: String,
    kind: String,
    /// As the API server's discovery says: such a kind is never listed
    /// by namespace, whether or not any object of it exists.
    cluster_scoped: bool,
    cache: watch::Receiver<KindCache>,
}

/// Watch caches of a cluster. Dropping it stops the watches.
pub struct LiveCluster {
    /// A handful of kinds: found by a scan, with nothing allocated.
    kinds: Vec<WatchedKind>,
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
            .field(
                "kinds",
                &self
                    .kinds
                    .iter()
                    .map(|watched| (&watched.api_version, &watched.kind))
                    .collect::<Vec<_>>(),
            )
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
        let (client, watched) = runtime.block_on(async {
            let client = client(credentials).await?;
            let mut watched: Vec<WatchedKind> = Vec::new();
            for kind in kinds {
                let seen = watched
                    .iter()
                    .any(|w| w.api_version == kind.api_version && w.kind == kind.kind);
                if !seen {
                    let (cache, cluster_scoped) = watch_kind(client.clone(), kind).await?;
                    watched.push(WatchedKind {
                        api_version: kind.api_version.clone(),
                        kind: kind.kind.clone(),
                        cluster_scoped,
                        cache,
                    });
                }
            }
            Ok::<_, String>((client, watched))
        })?;
        Ok(Self {
            kinds: watched,
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
            for watched in &self.kinds {
                let filling = self.until_filled(&watched.api_version, &watched.kind);
                // Past the deadline, the next kinds are only checked.
                let _ = tokio::time::timeout_at(deadline, filling).await;
            }
        });
        for watched in &self.kinds {
            self.cache_filled(&watched.api_version, &watched.kind)?;
        }
        Ok(())
    }

    fn watched(&self, api_version: &str, kind: &str) -> Result<&WatchedKind, String> {
        self.kinds
            .iter()
            .find(|watched| watched.api_version == api_version && watched.kind == kind)
            .ok_or_else(|| format!("{api_version} {kind} is not watched by this host"))
    }

    fn cache(&self, api_version: &str, kind: &str) -> Result<&watch::Receiver<KindCache>, String> {
        self.watched(api_version, kind)
            .map(|watched| &watched.cache)
    }

    fn snapshot(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<Arc<Vec<Arc<StoredObject>>>, String> {
        served_objects(self.cache(api_version, kind)?, api_version, kind)
    }
}

/// What a kind's cache serves: its objects once filled, else why not.
fn served_objects(
    cache: &watch::Receiver<KindCache>,
    api_version: &str,
    kind: &str,
) -> Result<Arc<Vec<Arc<StoredObject>>>, String> {
    if cache.is_closed() {
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

impl ClusterReads for LiveCluster {
    fn cache_filled(&self, api_version: &str, kind: &str) -> Result<(), String> {
        self.snapshot(api_version, kind).map(drop)
    }

    fn until_filled(&self, api_version: &str, kind: &str) -> BoxFuture<'static, ()> {
        let cache = self.cache(api_version, kind).ok().cloned();
        Box::pin(async move {
            if let Some(mut cache) = cache {
                // An error means the watch has stopped: nothing to wait for.
                let _ = cache.wait_for(|cache| cache.objects.is_some()).await;
            }
        })
    }

    fn list(&self, request: &ListRequest) -> Result<Vec<u8>, String> {
        let watched = self.watched(&request.api_version, &request.kind)?;
        if let (true, Some(namespace)) = (watched.cluster_scoped, &request.namespace) {
            return Err(not_namespaced(request, namespace));
        }
        let objects = served_objects(&watched.cache, &request.api_version, &request.kind)?;
        list_of(&objects, request)
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

/// How a watch retries after an error: quickly until its first list is
/// in, then as kube does by default. Before the first list, the errors are
/// mostly the host's own conversion webhook not serving yet (see the
/// module's comment), and kube's backoff, growing to 30 s, would leave the
/// caches empty long after the host serves; this one waits at most 2 s
/// (1 s, plus up to as much again of jitter). Once filled, a cache serves
/// while its watch reconnects, and the API server is spared fast retries.
struct RetryBackoff {
    filled: Arc<AtomicBool>,
    before_filled: ResetTimerBackoff<ExponentialBackoff>,
    after_filled: DefaultBackoff,
}

impl RetryBackoff {
    fn new(filled: Arc<AtomicBool>) -> Self {
        let fast = backon::ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_secs(1))
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        Self {
            filled,
            before_filled: ResetTimerBackoff::new(
                ExponentialBackoff::from(fast),
                Duration::from_mins(2),
            ),
            after_filled: DefaultBackoff::default(),
        }
    }
}

impl Iterator for RetryBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        if self.filled.load(Ordering::Relaxed) {
            self.after_filled.next()
        } else {
            self.before_filled.next()
        }
    }
}

impl Backoff for RetryBackoff {
    fn reset(&mut self) {
        self.before_filled.reset();
        self.after_filled.reset();
    }
}

/// Starts the watch of one kind; its cache fills in the background. Also
/// says whether the kind is cluster-scoped.
async fn watch_kind(
    client: Client,
    kind: &ContextAwareResource,
) -> Result<(watch::Receiver<KindCache>, bool), String> {
    let (group, version) = kind
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", kind.api_version.as_str()));
    let gvk = GroupVersionKind::gvk(group, version, &kind.kind);
    let (resource, capabilities) = kube::discovery::pinned_kind(&client, &gvk)
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
        let filled = Arc::new(AtomicBool::new(false));
        let events =
            reflector::reflector(writer, objects).backoff(RetryBackoff::new(Arc::clone(&filled)));
        futures::pin_mut!(events);
        let mut written = HashMap::new();
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => continue,
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, kind = %resource.kind, "watch error; retrying");
                    cache.send_if_modified(|cache| {
                        let unfilled = cache.objects.is_none();
                        if unfilled {
                            cache.last_error = Some(error.to_string());
                        }
                        unfilled
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
            filled.store(true, Ordering::Relaxed);
        }
    });
    Ok((filled, capabilities.scope == Scope::Cluster))
}

/// The texts written at the last event, by namespace and name, with the
/// object each was written from.
type Written = HashMap<(Option<String>, String), (Arc<DynamicObject>, Arc<StoredObject>)>;

/// The cached objects as the API would list them: with apiVersion and
/// kind, sorted by namespace and name. An object the watch did not touch
/// since the last event keeps its text (`written`, updated here): the
/// reflector's store hands back the very same object then, and a new one
/// for each object an event or a new list delivered (a new list may
/// change what an unchanged resourceVersion reads as, through conversion
/// or defaults), so an event writes out only the objects it delivered.
fn stored_objects(
    objects: &[Arc<DynamicObject>],
    resource: &ApiResource,
    written: &mut Written,
) -> Vec<Arc<StoredObject>> {
    let mut previous = std::mem::take(written);
    let mut stored: Vec<Arc<StoredObject>> = objects
        .iter()
        .filter_map(|object| {
            let key = (object.namespace(), object.name_any());
            let text = match previous.remove(&key) {
                Some((from, text)) if Arc::ptr_eq(&from, object) => text,
                _ => Arc::new(stored_object(object, resource)?),
            };
            written.insert(key, (Arc::clone(object), Arc::clone(&text)));
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
        let answer = list_of(stored, &ListRequest::all("v1", "Pod")).unwrap();
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        answer["items"].as_array().unwrap().clone()
    }

    /// Each watch event writes out only the objects it delivered: an object
    /// the store hands back unchanged keeps the text written before, even
    /// the same resourceVersion delivered anew (a new list) is written
    /// again, and deleted objects are forgotten.
    #[test]
    fn a_watch_event_writes_only_the_objects_it_delivered() {
        let pods = ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
        let mut written = Written::new();
        let (web, db) = (pod("b", "web", "1"), pod("a", "db", "1"));
        let first = stored_objects(&[Arc::clone(&web), Arc::clone(&db)], &pods, &mut written);
        let items = texts(&first);
        assert_eq!(items[0]["metadata"]["name"], "db", "sorted by namespace");
        assert_eq!(items[0]["kind"], "Pod");
        assert_eq!(items[0]["apiVersion"], "v1");

        let second = stored_objects(
            &[pod("b", "web", "2"), Arc::clone(&db)],
            &pods,
            &mut written,
        );
        assert!(Arc::ptr_eq(&first[0], &second[0]), "db was not delivered");
        assert!(!Arc::ptr_eq(&first[1], &second[1]), "web was");
        assert_eq!(texts(&second)[1]["metadata"]["resourceVersion"], "2");

        let relisted = stored_objects(&[pod("a", "db", "1")], &pods, &mut written);
        assert!(
            !Arc::ptr_eq(&second[0], &relisted[0]),
            "a new list is written"
        );
        assert_eq!(written.len(), 1, "web, deleted, is forgotten");
    }

    /// What a cache serves before it fills, after, and once its watch has
    /// stopped.
    #[test]
    fn a_cache_serves_once_filled_and_says_why_not_before() {
        let served = |cache: &watch::Receiver<KindCache>| {
            served_objects(cache, "apps.kruise.io/v1alpha1", "SidecarSet").map(|o| o.len())
        };
        let (sender, cache) = watch::channel(KindCache::default());
        assert_eq!(
            served(&cache).unwrap_err(),
            "the host's watch cache of apps.kruise.io/v1alpha1 SidecarSet has not filled yet"
        );
        sender.send_modify(|cache| cache.last_error = Some("refused".to_owned()));
        assert_eq!(
            served(&cache).unwrap_err(),
            "the host's watch cache of apps.kruise.io/v1alpha1 SidecarSet has not filled yet \
             (last watch error: refused)"
        );
        sender.send_replace(KindCache {
            objects: Some(Arc::new(Vec::new())),
            last_error: None,
        });
        assert_eq!(served(&cache), Ok(0));
        drop(sender);
        assert_eq!(
            served(&cache).unwrap_err(),
            "the host's watch of apps.kruise.io/v1alpha1 SidecarSet has stopped"
        );
    }
}
