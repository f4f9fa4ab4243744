//! One watch per kind for the whole manager. Several controllers react to
//! pods (CloneSet owns them, SidecarSet maps them to its sets, the launch
//! barrier reconciles them) and two to ControllerRevisions; each used to
//! open a full-cluster watch of its own, so the API server sent, and the
//! manager decoded and kept, every pod change three times.
//!
//! A [`SharedWatch`] runs the watch once, keeps one store and hands each
//! subscriber every object that changed, deleted ones included.
//! kube-runtime's own shared reflector is not used for the fan-out: it
//! drops deletions (kube-rs issue 1590), and a CloneSet must hear that a
//! pod is gone to replace it.
//!
//! What a subscriber receives:
//! * first, what the store holds when it subscribes, so subscribing late
//!   misses nothing;
//! * every object applied or deleted after that;
//! * after each full list (the first one, and the re-list when a watch is
//!   restarted), every listed object and every object that vanished while
//!   the watch was down, as a plain watch's own re-list would, and better:
//!   a plain watch never reports the vanished ones.
//!
//! Objects are kept without their `metadata.managedFields`: no controller
//! reads them, and in a pod they are often as big as the rest of it, kept
//! and cloned for every round. An update sent from a stored object leaves
//! the API server's own record as it is: the server keeps its
//! managedFields when a write leaves them out.
//!
//! A subscriber that stops reading holds the watch back (each has a
//! bounded queue, whose depth is the `kruise_watch_queue_depth` metric);
//! one that is dropped is forgotten. The watch stops when
//! the [`SharedWatch`] and every subscription are gone.

use std::collections::HashSet;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::{Stream, StreamExt, stream};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{Lookup, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use prometheus_client::metrics::gauge::Gauge;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::metrics;
use crate::readiness::Listed;

/// How many changed objects wait for a subscriber before the watch waits
/// for it.
const QUEUE: usize = 1024;

/// One watch of `K` with its store, shared by every subscriber.
pub struct SharedWatch<K: Lookup + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    progress: Arc<Progress>,
    subscribers: Subscribers<K>,
    running: Arc<StopOnDrop>,
}

/// How far the store has come: whether its first list is in, and the
/// newest resourceVersion it holds. One watch delivers changes in the
/// order of their versions, so a store that has seen version `v` holds
/// every change up to `v`: what [`SharedWatch::has_seen`] tells a
/// controller about its own writes.
#[derive(Debug, Default)]
struct Progress {
    listed: Listed,
    newest: AtomicU64,
}

impl Progress {
    /// Called after the store took the change (Release: a reader that
    /// sees the version sees the store that holds it).
    fn reached(&self, version: u64) {
        self.newest.fetch_max(version, Ordering::Release);
    }
}

type Subscribers<K> = Arc<Mutex<Vec<Subscriber<K>>>>;

/// One subscription's end of its queue.
struct Subscriber<K> {
    sender: mpsc::Sender<Arc<K>>,
    queued: Gauge,
}

impl<K> Clone for Subscriber<K> {
    fn clone(&self) -> Self {
        Self {
            sender: self.sender.clone(),
            queued: self.queued.clone(),
        }
    }
}

impl<K> Subscriber<K> {
    fn depth(&self) -> i64 {
        let queued = self.sender.max_capacity() - self.sender.capacity();
        i64::try_from(queued).unwrap_or(i64::MAX)
    }
}

impl<K> SharedWatch<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// Starts watching every `K` the client can see (a tokio task).
    pub fn all(client: Client) -> Self {
        let events = watcher(Api::<K>::all(client), watcher::Config::default()).default_backoff();
        Self::from_events(events)
    }

    /// Starts watching every `K` in `namespace` (a tokio task).
    pub fn namespaced(client: Client, namespace: &str) -> Self
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    {
        let api = Api::<K>::namespaced(client, namespace);
        Self::from_events(watcher(api, watcher::Config::default()).default_backoff())
    }

    /// Starts fanning out `events` (a watcher's; the tests' own).
    pub fn from_events(
        events: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    ) -> Self {
        let writer = Writer::default();
        let store = writer.as_reader();
        let subscribers = Subscribers::default();
        let progress = Arc::new(Progress::default());
        let task = tokio::spawn(drive(events, writer, progress.clone(), subscribers.clone()));
        Self {
            store,
            progress,
            subscribers,
            running: Arc::new(StopOnDrop(task)),
        }
    }

    /// The one store every subscriber reads.
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// Whether the store holds a complete list: before that, an object
    /// missing from it may well exist.
    pub fn is_listed(&self) -> bool {
        self.progress.listed.get()
    }

    /// The flag [`SharedWatch::is_listed`] reads, for the readiness
    /// tracker.
    pub fn listed(&self) -> Listed {
        self.progress.listed.clone()
    }

    /// Whether the store holds every change up to `resource_version` (the
    /// API server's answer to a write). Versions are compared as the
    /// numbers the API server gives them; one that is not a number is
    /// never seen, so a caller reads fresh instead.
    pub fn has_seen(&self, resource_version: &str) -> bool {
        resource_version
            .parse::<u64>()
            .is_ok_and(|version| self.progress.newest.load(Ordering::Acquire) >= version)
    }

    /// Every object now in the store, then every change (see the module);
    /// `controller` names the subscriber in the queue-depth metric.
    pub fn subscribe(&self, controller: &str) -> impl Stream<Item = Arc<K>> + Send + 'static {
        let (sender, receiver) = mpsc::channel(QUEUE);
        let queued = metrics::global().watch_queue(&K::kind(&()), controller);
        // Under the lock the driver applies events with: each change is
        // either in this snapshot or sent to this subscriber, never neither.
        let current = {
            let mut subscribers = lock(&self.subscribers);
            subscribers.push(Subscriber {
                sender,
                queued: queued.clone(),
            });
            self.store.state()
        };
        let later = stream::unfold(
            (receiver, queued, self.running.clone()),
            |(mut receiver, queued, running)| async move {
                let object = receiver.recv().await?;
                queued.set(i64::try_from(receiver.len()).unwrap_or(i64::MAX));
                Some((object, (receiver, queued, running)))
            },
        );
        stream::iter(current).chain(later)
    }
}

impl<K> Clone for SharedWatch<K>
where
    K: Lookup + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            progress: self.progress.clone(),
            subscribers: self.subscribers.clone(),
            running: self.running.clone(),
        }
    }
}

impl<K> Debug for SharedWatch<K>
where
    K: Lookup + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedWatch")
            .field("objects", &self.store.len())
            .field("subscribers", &lock(&self.subscribers).len())
            .finish_non_exhaustive()
    }
}

/// Applies each event to the store and sends what it touched to every
/// subscriber, in order.
async fn drive<K>(
    events: impl Stream<Item = watcher::Result<watcher::Event<K>>>,
    mut writer: Writer<K>,
    progress: Arc<Progress>,
    subscribers: Subscribers<K>,
) where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let mut events = std::pin::pin!(events);
    // The newest version of a list under way: the store shows it at
    // InitDone only.
    let mut listing = 0;
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event.modify(|object| object.meta_mut().managed_fields = None),
            Err(error) => {
                tracing::warn!(%error, "shared watch failed; it restarts with backoff");
                continue;
            }
        };
        let (touched, receivers) = {
            let subscribers = lock(&subscribers);
            (apply(&mut writer, &event), subscribers.clone())
        };
        record_progress(&progress, &event, &mut listing);
        let mut someone_left = false;
        for object in touched {
            for receiver in &receivers {
                someone_left |= receiver.sender.send(object.clone()).await.is_err();
                receiver.queued.set(receiver.depth());
            }
        }
        if someone_left {
            lock(&subscribers).retain(|subscriber| {
                let gone = subscriber.sender.is_closed();
                if gone {
                    subscriber.queued.set(0);
                }
                !gone
            });
        }
    }
}

/// Applies `event` to the store; what subscribers are told of it.
fn apply<K>(writer: &mut Writer<K>, event: &watcher::Event<K>) -> Vec<Arc<K>>
where
    K: Lookup + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
{
    match event {
        watcher::Event::Apply(object) => {
            writer.apply_watcher_event(event);
            // The store's own copy, rather than one more clone.
            let stored = writer.as_reader().get(&key::<K>(object));
            vec![stored.unwrap_or_else(|| Arc::new(object.clone()))]
        }
        watcher::Event::Delete(object) => {
            writer.apply_watcher_event(event);
            vec![Arc::new(object.clone())]
        }
        // Listed objects are told once the list is complete (below), so a
        // subscriber that joins mid-list, whose snapshot is the old store,
        // still hears of them.
        watcher::Event::Init | watcher::Event::InitApply(_) => {
            writer.apply_watcher_event(event);
            Vec::new()
        }
        watcher::Event::InitDone => {
            let before = writer.as_reader().state();
            writer.apply_watcher_event(event);
            let listed = writer.as_reader().state();
            let still_there: HashSet<ObjectRef<K>> =
                listed.iter().map(|object| key::<K>(object)).collect();
            let vanished = before
                .into_iter()
                .filter(|object| !still_there.contains(&key::<K>(object)));
            listed.iter().cloned().chain(vanished).collect()
        }
    }
}

/// Moves the store's progress on past `event`, which it has taken.
fn record_progress<K: Resource>(progress: &Progress, event: &watcher::Event<K>, listing: &mut u64) {
    let version = |object: &K| {
        object
            .meta()
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    match event {
        watcher::Event::Apply(object) | watcher::Event::Delete(object) => {
            progress.reached(version(object));
        }
        watcher::Event::Init => *listing = 0,
        watcher::Event::InitApply(object) => *listing = (*listing).max(version(object)),
        watcher::Event::InitDone => {
            progress.reached(*listing);
            progress.listed.set();
        }
    }
}

fn key<K>(object: &K) -> ObjectRef<K>
where
    K: Lookup,
    K::DynamicType: Default,
{
    object.to_object_ref(K::DynamicType::default())
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The list stays consistent whatever a panicking holder did.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Stops the watch task when the last handle on it goes.
struct StopOnDrop(JoinHandle<()>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The watches the manager's controllers share, each started when a
/// controller first asks for it. Cloning shares them.
#[derive(Clone)]
pub struct SharedWatches {
    client: Client,
    pods: Arc<std::sync::OnceLock<SharedWatch<Pod>>>,
    revisions: Arc<std::sync::OnceLock<SharedWatch<ControllerRevision>>>,
    claims: Arc<std::sync::OnceLock<SharedWatch<PersistentVolumeClaim>>>,
    namespaces: Arc<std::sync::OnceLock<SharedWatch<Namespace>>>,
}

impl Debug for SharedWatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedWatches")
            .field("pods", &self.pods.get())
            .field("revisions", &self.revisions.get())
            .field("claims", &self.claims.get())
            .field("namespaces", &self.namespaces.get())
            .finish_non_exhaustive()
    }
}

impl SharedWatches {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            pods: Arc::default(),
            revisions: Arc::default(),
            claims: Arc::default(),
            namespaces: Arc::default(),
        }
    }

    /// Every pod in the cluster.
    pub fn pods(&self) -> &SharedWatch<Pod> {
        self.pods
            .get_or_init(|| SharedWatch::all(self.client.clone()))
    }

    /// Every ControllerRevision in the cluster.
    pub fn revisions(&self) -> &SharedWatch<ControllerRevision> {
        self.revisions
            .get_or_init(|| SharedWatch::all(self.client.clone()))
    }

    /// Every PersistentVolumeClaim in the cluster.
    pub fn claims(&self) -> &SharedWatch<PersistentVolumeClaim> {
        self.claims
            .get_or_init(|| SharedWatch::all(self.client.clone()))
    }

    /// Every Namespace in the cluster.
    pub fn namespaces(&self) -> &SharedWatch<Namespace> {
        self.namespaces
            .get_or_init(|| SharedWatch::all(self.client.clone()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::collections::BTreeSet;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
    use kube::api::ObjectMeta;
    use tokio::sync::mpsc::UnboundedSender;

    use super::*;

    type Events = UnboundedSender<watcher::Result<watcher::Event<Pod>>>;

    fn watch() -> (Events, SharedWatch<Pod>) {
        let (events, received) = mpsc::unbounded_channel();
        let stream = stream::unfold(received, |mut received| async move {
            let event = received.recv().await?;
            Some((event, received))
        });
        (events, SharedWatch::from_events(stream))
    }

    fn pod(name: &str, version: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some("default".to_owned()),
                resource_version: Some(version.to_owned()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    fn list(events: &Events, pods: &[Pod]) {
        events.send(Ok(watcher::Event::Init)).unwrap();
        for pod in pods {
            events
                .send(Ok(watcher::Event::InitApply(pod.clone())))
                .unwrap();
        }
        events.send(Ok(watcher::Event::InitDone)).unwrap();
    }

    /// The next `count` objects a subscription yields, as name@version; a
    /// subscription that has fewer in 10 s fails the test.
    async fn next(
        subscription: &mut (impl Stream<Item = Arc<Pod>> + Unpin),
        count: usize,
    ) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        for _ in 0..count {
            let pod = tokio::time::timeout(std::time::Duration::from_secs(10), subscription.next())
                .await
                .unwrap_or_else(|_| panic!("only {} of {count} objects came: {seen:?}", seen.len()))
                .unwrap();
            let version = pod.metadata.resource_version.clone().unwrap();
            seen.insert(format!("{}@{version}", pod.metadata.name.clone().unwrap()));
        }
        seen
    }

    fn names(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|&item| item.to_owned()).collect()
    }

    /// Lets the watch task take every event sent so far (the test runtime
    /// has one thread: the task runs only while the test waits).
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_subscriber_hears_of_listed_applied_and_deleted_objects() {
        let (events, watch) = watch();
        let mut subscription = Box::pin(watch.subscribe("test"));
        list(&events, &[pod("a", "1"), pod("b", "1")]);
        assert_eq!(next(&mut subscription, 2).await, names(&["a@1", "b@1"]));
        events
            .send(Ok(watcher::Event::Apply(pod("a", "2"))))
            .unwrap();
        assert_eq!(next(&mut subscription, 1).await, names(&["a@2"]));
        events
            .send(Ok(watcher::Event::Delete(pod("b", "3"))))
            .unwrap();
        assert_eq!(next(&mut subscription, 1).await, names(&["b@3"]));
        let stored: Vec<_> = watch
            .store()
            .state()
            .iter()
            .map(|p| p.metadata.resource_version.clone())
            .collect();
        assert_eq!(stored, [Some("2".to_owned())]);
    }

    #[tokio::test]
    async fn objects_are_kept_and_handed_on_without_managed_fields() {
        let managed = |name: &str, version: &str| {
            let mut pod = pod(name, version);
            pod.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
                manager: Some("kubelet".to_owned()),
                ..ManagedFieldsEntry::default()
            }]);
            pod
        };
        let (events, watch) = watch();
        let mut subscription = Box::pin(watch.subscribe("test"));
        list(&events, &[managed("a", "1")]);
        let listed = next_object(&mut subscription).await;
        events
            .send(Ok(watcher::Event::Apply(managed("a", "2"))))
            .unwrap();
        let applied = next_object(&mut subscription).await;
        events
            .send(Ok(watcher::Event::Delete(managed("a", "3"))))
            .unwrap();
        let deleted = next_object(&mut subscription).await;
        for pod in [&listed, &applied, &deleted] {
            assert_eq!(pod.metadata.managed_fields, None, "{:?}", pod.metadata);
        }
        assert_eq!(applied.metadata.resource_version.as_deref(), Some("2"));
        assert_eq!(deleted.metadata.resource_version.as_deref(), Some("3"));
    }

    #[tokio::test]
    async fn an_applied_object_is_handed_on_as_the_store_holds_it() {
        let (events, watch) = watch();
        let mut subscription = Box::pin(watch.subscribe("test"));
        list(&events, &[]);
        events
            .send(Ok(watcher::Event::Apply(pod("a", "1"))))
            .unwrap();
        let applied = next_object(&mut subscription).await;
        let stored = watch.store().state();
        assert!(Arc::ptr_eq(&applied, &stored[0]), "a second copy was made");
    }

    async fn next_object(subscription: &mut (impl Stream<Item = Arc<Pod>> + Unpin)) -> Arc<Pod> {
        tokio::time::timeout(std::time::Duration::from_secs(10), subscription.next())
            .await
            .expect("no object came in 10 s")
            .expect("the subscription ended")
    }

    #[tokio::test]
    async fn a_late_subscriber_gets_the_store_first_then_the_changes() {
        let (events, watch) = watch();
        let mut first = Box::pin(watch.subscribe("test"));
        list(&events, &[pod("a", "1"), pod("b", "1")]);
        next(&mut first, 2).await;
        let mut late = Box::pin(watch.subscribe("test"));
        assert_eq!(next(&mut late, 2).await, names(&["a@1", "b@1"]));
        events
            .send(Ok(watcher::Event::Apply(pod("c", "2"))))
            .unwrap();
        assert_eq!(next(&mut late, 1).await, names(&["c@2"]));
        assert_eq!(next(&mut first, 1).await, names(&["c@2"]));
    }

    #[tokio::test]
    async fn a_subscriber_joining_mid_list_hears_of_the_listed_objects() {
        let (events, watch) = watch();
        events.send(Ok(watcher::Event::Init)).unwrap();
        events
            .send(Ok(watcher::Event::InitApply(pod("a", "1"))))
            .unwrap();
        settle().await;
        // The store is still empty: the list is not complete.
        assert!(watch.store().state().is_empty());
        let mut subscription = Box::pin(watch.subscribe("test"));
        events
            .send(Ok(watcher::Event::InitApply(pod("b", "1"))))
            .unwrap();
        events.send(Ok(watcher::Event::InitDone)).unwrap();
        assert_eq!(next(&mut subscription, 2).await, names(&["a@1", "b@1"]));
    }

    #[tokio::test]
    async fn a_relist_reports_the_objects_that_vanished_while_the_watch_was_down() {
        let (events, watch) = watch();
        let mut subscription = Box::pin(watch.subscribe("test"));
        list(&events, &[pod("a", "1"), pod("b", "1")]);
        next(&mut subscription, 2).await;
        list(&events, &[pod("a", "5")]);
        // a as listed, b as last seen: gone.
        assert_eq!(next(&mut subscription, 2).await, names(&["a@5", "b@1"]));
        assert_eq!(watch.store().state().len(), 1);
    }

    #[tokio::test]
    async fn a_dropped_subscriber_does_not_hold_the_watch_back() {
        let (events, watch) = watch();
        drop(watch.subscribe("test"));
        let mut reader = Box::pin(watch.subscribe("test"));
        let changes = 3 * QUEUE;
        for version in 0..changes {
            events
                .send(Ok(watcher::Event::Apply(pod("a", &version.to_string()))))
                .unwrap();
        }
        // A watch waiting on the dropped subscriber would stall at QUEUE.
        assert_eq!(next(&mut reader, changes).await.len(), changes);
        assert_eq!(lock(&watch.subscribers).len(), 1);
    }

    #[tokio::test]
    async fn the_queue_depth_metric_counts_what_a_controller_has_not_taken() {
        let depth = || {
            let text = metrics::global().encode();
            let line = "kruise_watch_queue_depth{kind=\"Pod\",controller=\"slow-test\"} ";
            text.lines()
                .find_map(|found| found.strip_prefix(line))
                .map(str::to_owned)
        };
        let (events, watch) = watch();
        let mut slow = Box::pin(watch.subscribe("slow-test"));
        for version in 0..3 {
            events
                .send(Ok(watcher::Event::Apply(pod("a", &version.to_string()))))
                .unwrap();
        }
        settle().await;
        assert_eq!(depth().as_deref(), Some("3"));
        next(&mut slow, 2).await;
        assert_eq!(depth().as_deref(), Some("1"));
        drop(slow);
        events
            .send(Ok(watcher::Event::Apply(pod("a", "9"))))
            .unwrap();
        settle().await;
        assert_eq!(
            depth().as_deref(),
            Some("0"),
            "a dropped subscriber queues nothing"
        );
    }

    #[tokio::test]
    async fn the_watch_runs_while_a_subscription_does_and_stops_after() {
        let (events, watch) = watch();
        let subscription = watch.subscribe("test");
        drop(watch);
        settle().await;
        assert!(!events.is_closed(), "a subscription still reads the watch");
        drop(subscription);
        settle().await;
        assert!(events.is_closed(), "nothing reads the watch: it must stop");
    }

    #[tokio::test]
    async fn the_store_says_which_versions_it_has_seen_once_listed() {
        let (events, watch) = watch();
        let mut subscription = Box::pin(watch.subscribe("test"));
        assert!(!watch.is_listed());
        events.send(Ok(watcher::Event::Init)).unwrap();
        events
            .send(Ok(watcher::Event::InitApply(pod("a", "3"))))
            .unwrap();
        events
            .send(Ok(watcher::Event::InitApply(pod("b", "5"))))
            .unwrap();
        settle().await;
        assert!(!watch.is_listed());
        assert!(
            !watch.has_seen("3"),
            "a list under way is not in the store yet"
        );
        events.send(Ok(watcher::Event::InitDone)).unwrap();
        next(&mut subscription, 2).await;
        assert!(watch.is_listed());
        assert!(watch.has_seen("5") && !watch.has_seen("6"));
        events
            .send(Ok(watcher::Event::Apply(pod("c", "7"))))
            .unwrap();
        events
            .send(Ok(watcher::Event::Delete(pod("a", "9"))))
            .unwrap();
        next(&mut subscription, 2).await;
        assert!(watch.has_seen("9") && !watch.has_seen("10"));
        assert!(!watch.has_seen("not-a-number"));
        // A re-list never moves it back.
        list(&events, &[pod("b", "5")]);
        next(&mut subscription, 2).await;
        assert!(watch.has_seen("9"));
    }
}
