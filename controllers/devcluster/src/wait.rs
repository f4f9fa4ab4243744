//! Waiting on the dev cluster, for the end-to-end tests of every crate:
//! each helper polls, and fails the test with the last state it saw.

use std::fmt::Debug;
use std::future::Future;
use std::time::{Duration, Instant};

use kube::Api;
use serde::de::DeserializeOwned;

const DEADLINE: Duration = Duration::from_mins(1);
const POLL: Duration = Duration::from_millis(200);

/// Polls `name` until `check` returns `Some`, or fails the test with the
/// last state seen.
pub async fn wait_for<K, T>(
    api: &Api<K>,
    name: &str,
    what: &str,
    check: impl Fn(&K) -> Option<T>,
) -> T
where
    K: kube::Resource + Clone + DeserializeOwned + Debug,
{
    let deadline = Instant::now() + DEADLINE;
    let mut last = None;
    while Instant::now() < deadline {
        if let Ok(Some(object)) = api.get_opt(name).await {
            if let Some(found) = check(&object) {
                return found;
            }
            last = Some(object);
        }
        tokio::time::sleep(POLL).await;
    }
    panic!("timed out waiting for {name}: {what}; last seen: {last:#?}");
}

/// Polls `name` until it is gone, for at most `within`.
pub async fn wait_gone<K>(api: &Api<K>, name: &str, what: &str, within: Duration)
where
    K: kube::Resource + Clone + DeserializeOwned + Debug,
{
    let deadline = Instant::now() + within;
    let mut last = None;
    while Instant::now() < deadline {
        match api.get_opt(name).await {
            Ok(None) => return,
            Ok(Some(object)) => last = Some(object),
            Err(_) => {}
        }
        tokio::time::sleep(POLL).await;
    }
    panic!("timed out waiting for {name} to go: {what}; last seen: {last:#?}");
}

/// Polls `probe` until it returns `Some`.
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + DEADLINE;
    while Instant::now() < deadline {
        if let Some(found) = probe().await {
            return found;
        }
        tokio::time::sleep(POLL).await;
    }
    panic!("timed out waiting until {what}");
}
