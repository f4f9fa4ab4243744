//! What a controller does with each result of its reconcile stream.

use kube::Resource;
use kube::runtime::controller::{Action, Error};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

/// Logs one result of `Controller::run`: a failed reconcile is already
/// logged by the error policy, an object deleted while queued is nothing
/// to worry about, anything else (the watch failing) is a warning.
pub fn log<K, E>(
    controller: &str,
    result: &Result<(ObjectRef<K>, Action), Error<E, watcher::Error>>,
) where
    K: Resource,
    E: std::error::Error + 'static,
{
    match result {
        Ok(_) | Err(Error::ReconcilerFailed(..)) => {}
        Err(error @ Error::ObjectNotFound(..)) => tracing::debug!(controller, %error, "skipped"),
        Err(error) => tracing::warn!(controller, %error, "controller error"),
    }
}
