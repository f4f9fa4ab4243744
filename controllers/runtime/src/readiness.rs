//! Whether this process's controllers have their caches: `/readyz` answers
//! ready only once every controller the manager expects has listed its
//! objects (a controller acting on a half-filled cache would, say, create
//! pods that already exist).
//!
//! The manager declares the controllers it starts ([`Readiness::expect`])
//! before they run, so `/readyz` cannot say ready in the moment between
//! spawning a controller and the controller registering its cache.

use std::collections::BTreeMap;
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::Duration;

use kube::Resource;
use kube::runtime::reflector::Store;

/// How often a tracked store is looked at until it has synced.
const SYNC_CHECK: Duration = Duration::from_millis(100);

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

    /// Marks `controller` synced once `store` has its first full list.
    pub fn track<K>(&'static self, controller: &'static str, store: Store<K>)
    where
        K: Resource + Clone + Send + Sync + 'static,
        K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
    {
        self.expect(controller);
        tokio::spawn(async move {
            // kube-runtime's store wakes only the last of several waiters
            // (the controller itself waits too), so look again every tick.
            loop {
                match tokio::time::timeout(SYNC_CHECK, store.wait_until_ready()).await {
                    Ok(Ok(())) => break,
                    // The controller (the store's writer) ended before its
                    // first list: never ready.
                    Ok(Err(_)) => return,
                    Err(_) => {}
                }
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
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;
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
    async fn a_tracked_store_is_synced_after_its_first_list() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let readiness: &'static Readiness = Box::leak(Box::default());
        readiness.track("maps", store.clone());
        // Another waiter on the same store, as the controller itself is.
        let other = tokio::spawn(async move { store.wait_until_ready().await.is_ok() });
        tokio::task::yield_now().await;
        assert_eq!(readiness.waiting_for(), ["maps"]);
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitDone);
        for _ in 0..50 {
            if readiness.waiting_for().is_empty() {
                assert!(other.await.unwrap());
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("still waiting for {:?}", readiness.waiting_for());
    }
}
