//! Waiting on the dev cluster, shared by the end-to-end tests.

use std::fmt::Debug;
use std::time::{Duration, Instant};

use kube::Api;
use kube::core::NamespaceResourceScope;
use serde::de::DeserializeOwned;

/// Polls `name` until `check` returns `Some`, or fails the test with the
/// last state seen.
pub async fn wait_for<K, T>(
    api: &Api<K>,
    name: &str,
    what: &str,
    check: impl Fn(&K) -> Option<T>,
) -> T
where
    K: kube::Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Debug,
{
    let deadline = Instant::now() + Duration::from_mins(1);
    let mut last = None;
    while Instant::now() < deadline {
        if let Ok(Some(object)) = api.get_opt(name).await {
            if let Some(found) = check(&object) {
                return found;
            }
            last = Some(object);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("timed out waiting for {name}: {what}; last seen: {last:#?}");
}
