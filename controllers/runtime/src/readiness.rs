//! Whether this process's controllers have their caches: `/readyz` answers
//! ready only once every controller the manager expects has listed its
//! objects (a controller acting on a half-filled cache would, say, create
//! pods that already exist).
//!
//! The manager declares the controllers it starts ([`Readiness::expect`])
//! before they run, so `/readyz` cannot say ready in the moment between
//! spawning a controller and the controller registering its cache.
//!
//! A cache's first list is told by a [`Listed`] flag its watch stream sets,
//! never by waiting on kube-runtime's `Store::wait_until_ready`: that wakes
//! only the last of its waiters, and the Controller owning the store waits
//! on it before its first round. A second waiter polled after the
//! Controller took its wake-up, and the Controller then started only on
//! its watch's next event.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use futures::{Stream, TryStreamExt};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, Lookup};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

/// How often a tracked cache is looked at until it has synced.
const SYNC_CHECK: Duration = Duration::from_millis(100);

/// Whether a watch's store holds its first full list; read without
/// waiting, by anyone.
#[derive(Debug, Clone, Default)]
pub struct Listed(Arc<AtomicBool>);

impl Listed {
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Called once the store has taken the list (Release: a reader that
    /// sees the flag sees the store that holds it); by tests, on stores
    /// they filled.
    pub fn set(&self) {
        self.0.store(true, Ordering::Release);
    }
}

/// `events` (a reflector's, so the store has taken each event before it
/// passes) with `listed` set at the end of the first list.
pub fn mark_listed<K, S>(events: S, listed: Listed) -> impl Stream<Item = S::Item>
where
    S: Stream<Item = watcher::Result<watcher::Event<K>>>,
{
    events.inspect_ok(move |event| {
        if matches!(event, watcher::Event::InitDone) {
            listed.set();
        }
    })
}

/// A Controller of the `K`s `api` reaches, built as `Controller::new`
/// builds it, and the flag its watch sets at the end of the first list.
pub fn controller<K>(api: Api<K>, config: watcher::Config) -> (Controller<K>, Listed)
where
    K: Resource<DynamicType = ()> + Lookup<DynamicType = ()>,
    K: Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let listed = Listed::default();
    let events = reflector::reflector(writer, watcher::watcher(api, config));
    let objects = mark_listed(events, listed.clone()).applied_objects();
    (Controller::for_stream(objects, store), listed)
}

#[derive(Debug, Default)]
pub struct Readiness {
    /// Controller name → whether its cache has synced.
    synced: Mutex<BTreeMap<String, bool>>,
}

impl Readiness {
    /// `controller` will run: not ready until it reports its cache synced.
    pub fn expect(&self, controller: &str) {
        self.lock().entry(controller.to_owned()).or_insert(false);
    }

    pub fn mark_synced(&self, controller: &str) {
        self.lock().insert(controller.to_owned(), true);
    }

    /// Marks `controller` synced once `listed` says its cache has its
    /// first full list.
    pub fn track(&'static self, controller: &'static str, listed: Listed) {
        self.expect(controller);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(SYNC_CHECK);
            while !listed.get() {
                ticks.tick().await;
            }
            self.mark_synced(controller);
            tracing::info!(controller, "cache synced");
        });
    }

    /// The expected controllers whose caches have not synced yet; empty
    /// means ready.
    pub fn waiting_for(&self) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, synced)| !**synced)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Forgets every controller (the manager stopped them: leadership lost).
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, bool>> {
        // The map stays consistent whatever a panicking holder did.
        self.synced.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

static READINESS: LazyLock<Readiness> = LazyLock::new(Readiness::default);

/// This process's readiness.
pub fn global() -> &'static Readiness {
    &READINESS
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use futures::{FutureExt, StreamExt};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::watcher::Event;

    use super::*;

    #[test]
    fn ready_only_when_every_expected_controller_synced() {
        let readiness = Readiness::default();
        assert!(readiness.waiting_for().is_empty(), "nothing expected");
        readiness.expect("a");
        readiness.expect("b");
        assert_eq!(readiness.waiting_for(), ["a", "b"]);
        readiness.mark_synced("b");
        readiness.expect("b");
        assert_eq!(
            readiness.waiting_for(),
            ["a"],
            "expecting again keeps synced"
        );
        readiness.mark_synced("a");
        assert!(readiness.waiting_for().is_empty());
        readiness.clear();
        readiness.expect("a");
        assert_eq!(readiness.waiting_for(), ["a"]);
    }

    #[tokio::test]
    async fn a_cache_is_synced_once_its_watch_has_listed() {
        let (store, writer) = reflector::store::<ConfigMap>();
        let listed = Listed::default();
        let readiness: &'static Readiness = Box::leak(Box::default());
        readiness.track("maps", listed.clone());
        let (sender, events) = futures::channel::mpsc::unbounded::<watcher::Result<_>>();
        let mut events = std::pin::pin!(mark_listed(reflector::reflector(writer, events), listed));
        sender.unbounded_send(Ok(Event::Init)).unwrap();
        events.next().await;
        tokio::time::sleep(3 * SYNC_CHECK).await;
        assert_eq!(
            readiness.waiting_for(),
            ["maps"],
            "not before the list ends"
        );
        sender.unbounded_send(Ok(Event::InitDone)).unwrap();
        events.next().await;
        assert!(
            store.wait_until_ready().now_or_never().is_some(),
            "the store took the list first"
        );
        wait_until_synced(readiness).await;
    }

    /// The Controller owning a store waits on it before its first round;
    /// tracking the cache must not take that wake-up away (kube-runtime
    /// wakes only the last waiter, and the tracker used to be one, polled
    /// every tick).
    #[tokio::test]
    async fn tracking_leaves_the_controllers_wake_up_alone() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let listed = Listed::default();
        let readiness: &'static Readiness = Box::leak(Box::default());
        let controller = tokio::spawn(async move { store.wait_until_ready().await.is_ok() });
        tokio::task::yield_now().await;
        readiness.track("maps", listed.clone());
        tokio::time::sleep(3 * SYNC_CHECK).await;
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitDone);
        listed.set();
        let woken = tokio::time::timeout(Duration::from_secs(2), controller).await;
        assert!(
            matches!(woken, Ok(Ok(true))),
            "the controller was not woken"
        );
        wait_until_synced(readiness).await;
    }

    async fn wait_until_synced(readiness: &Readiness) {
        for _ in 0..50 {
            if readiness.waiting_for().is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("still waiting for {:?}", readiness.waiting_for());
    }
}
