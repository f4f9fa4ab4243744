//! Watching the dev cluster from the end-to-end tests: every pod state the
//! API server shows during a rollout, to check a budget held at each one.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

/// (active pods, ready pods) after each change of the pods in `default`
/// matching a selector, from a watch (not sampling: no moment is missed
/// between two events). Active: not being deleted.
#[derive(Clone, Debug, Default)]
pub struct PodCounts(Arc<Mutex<Vec<(usize, usize)>>>);

impl PodCounts {
    /// Starts watching; `ready` says which pods count as ready.
    pub fn start(client: &Client, selector: &str, ready: fn(&Pod) -> bool) -> Self {
        let recorder = Self::default();
        let seen = recorder.0.clone();
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let config = watcher::Config::default().labels(selector);
        tokio::spawn(async move {
            let mut current: BTreeMap<String, Pod> = BTreeMap::new();
            // The initial list arrives pod by pod: record from its end on.
            let mut listed = false;
            let events = watcher(pods, config).default_backoff();
            futures::pin_mut!(events);
            while let Some(Ok(event)) = events.next().await {
                match event {
                    watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                        current.insert(pod.name_any(), pod);
                    }
                    watcher::Event::Delete(pod) => {
                        current.remove(&pod.name_any());
                    }
                    watcher::Event::Init => continue,
                    watcher::Event::InitDone => listed = true,
                }
                if !listed {
                    continue;
                }
                let active: Vec<&Pod> = current
                    .values()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .collect();
                let ready = active.iter().filter(|p| ready(p)).count();
                lock(&seen).push((active.len(), ready));
            }
        });
        recorder
    }

    /// The states seen since the last take.
    pub fn take(&self) -> Vec<(usize, usize)> {
        std::mem::take(&mut lock(&self.0))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
