//! The ResourceDistribution controller (spec 07 §3): one Secret or
//! ConfigMap copied into a set of namespaces and kept in sync there.
//!
//! [`run`] watches ResourceDistributions; Secrets and ConfigMaps, each
//! change reconciling its controller owner and the distributions of that
//! kind and name; and Namespaces (a namespace's labels decide whether it
//! is a target, so any namespace change reconciles every distribution).
//!
//! One reconcile reads the cluster (the namespaces, and the object of the
//! distributed kind and name in each), asks [`kruise_core::resourcedistribution::plan`]
//! what to do, performs the creates, updates and deletes it returns, and
//! writes the status through the status subresource when it changed. All
//! decisions are kruise-core's; this crate does the I/O.
//!
//! What happens when:
//! - an object of the same name that this distribution does not control
//!   is never written: it is reported as `ConflictOccurred` until it goes;
//! - a failed read or write (a 409 included) is reported in the status,
//!   logged, and retried with a per-distribution exponential backoff;
//! - a deleted distribution's copies go with it: each copy has the
//!   distribution as controller owner, and Kubernetes' garbage collector
//!   deletes them (no finalizer).
//!
//! Events on the distribution (cluster-scoped, so they land in `default`):
//! `ResourceCreated` / `ResourceUpdated` / `ResourceDeleted` (Normal) for
//! the writes made; the condition type (`CreateResourceFailed`,
//! `ConflictOccurred`, ...) as a Warning for failures; `InvalidSpec` when
//! the distribution cannot be planned at all.

mod cluster;
mod events;
mod reconcile;

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::Resource as _;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kruise_api::{ResourceDistribution, Stored};
use kruise_controller_runtime::context::Context;
use kruise_controller_runtime::{metrics, readiness};
use kruise_core::resourcedistribution::{ResourceKind, read_resource};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, controller, watcher};
use kube::{Api, Client, Resource};

/// The `reportingController` of the events and the name in the logs.
pub const CONTROLLER_NAME: &str = "kruise-resourcedistribution-controller";

/// The field manager of every write this controller makes.
pub const FIELD_MANAGER: &str = "kruise-resourcedistribution-controller";

/// Runs the controller until the watches end (they do not, short of the
/// task being dropped). Errors are logged and retried; nothing here
/// panics.
pub async fn run(client: Client) {
    // Stored<_>: one distribution our types cannot read must not fail the
    // watch of all the others (reconcile reports and skips it).
    let distributions: Api<Stored<ResourceDistribution>> = Api::all(client.clone());
    let namespace_changes = watcher(
        Api::<Namespace>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .touched_objects()
    .filter_map(|event| {
        futures::future::ready(match event {
            Ok(_) => Some(()),
            Err(error) => {
                tracing::warn!(%error, "namespace watch failed; retrying");
                None
            }
        })
    });
    let context = Arc::new(Context::new(client.clone(), CONTROLLER_NAME));
    let (controller, listed) = readiness::controller(distributions, watcher::Config::default());
    let store = controller.store();
    readiness::global().track(CONTROLLER_NAME, listed);
    tracing::info!(controller = CONTROLLER_NAME, "starting");
    controller
        .watches(
            Api::<ConfigMap>::all(client.clone()),
            watcher::Config::default(),
            triggers::<ConfigMap>(ResourceKind::ConfigMap, store.clone()),
        )
        .watches(
            Api::<Secret>::all(client),
            watcher::Config::default(),
            triggers::<Secret>(ResourceKind::Secret, store),
        )
        .reconcile_all_on(namespace_changes)
        .run(
            metrics::timed(CONTROLLER_NAME, reconcile::reconcile),
            reconcile::error_policy,
            context,
        )
        .for_each(|result| {
            match result {
                Ok((object, _)) => tracing::debug!(distribution = %object.name, "reconciled"),
                // Logged by the error policy.
                Err(controller::Error::ReconcilerFailed(..)) => {}
                // A distribution deleted before its queued reconcile ran.
                Err(error @ controller::Error::ObjectNotFound(..)) => {
                    tracing::debug!(%error, "skipped");
                }
                Err(error) => tracing::warn!(%error, "controller error"),
            }
            futures::future::ready(())
        })
        .await;
    tracing::info!(controller = CONTROLLER_NAME, "stopped");
}

/// The distributions a change of a Secret or ConfigMap concerns: its
/// controller owner, and every distribution of that kind and name (so a
/// foreign object of the same name that appears or goes is noticed).
///
/// kube's `Controller::owns` is not used: it puts the child's namespace
/// into the owner's reference, which for a cluster-scoped owner names an
/// object that does not exist (and would let one distribution be
/// reconciled concurrently under several names).
fn triggers<K>(
    kind: ResourceKind,
    store: Store<Stored<ResourceDistribution>>,
) -> impl Fn(K) -> Vec<ObjectRef<Stored<ResourceDistribution>>> + Send + Sync + 'static
where
    K: Resource,
{
    move |object: K| {
        let meta = object.meta();
        let name = meta.name.as_deref().unwrap_or_default();
        let mut refs: Vec<ObjectRef<Stored<ResourceDistribution>>> = meta
            .owner_references
            .iter()
            .flatten()
            .filter(|owner| {
                owner.controller == Some(true)
                    && owner.kind == ResourceDistribution::KIND
                    && owner
                        .api_version
                        .split_once('/')
                        .is_some_and(|(group, _)| group == ResourceDistribution::GROUP)
            })
            .map(|owner| ObjectRef::new(&owner.name))
            .collect();
        for distribution in store.state() {
            let distributes = distribution.object.as_ref().is_ok_and(|readable| {
                read_resource(&readable.spec.resource)
                    .is_ok_and(|resource| resource.kind == kind && resource.name == name)
            });
            if distributes {
                let reference = ObjectRef::from_obj(distribution.as_ref());
                if !refs.contains(&reference) {
                    refs.push(reference);
                }
            }
        }
        refs
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use kube::runtime::reflector::store::Writer;
    use serde_json::json;

    use super::*;

    fn distribution(name: &str, kind: &str, resource_name: &str) -> Stored<ResourceDistribution> {
        serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "ResourceDistribution",
            "metadata": {"name": name, "uid": format!("uid-{name}")},
            "spec": {
                "resource": {"apiVersion": "v1", "kind": kind, "metadata": {"name": resource_name}},
                "targets": {"allNamespaces": true},
            },
        }))
        .unwrap()
    }

    fn store(
        distributions: Vec<Stored<ResourceDistribution>>,
    ) -> Store<Stored<ResourceDistribution>> {
        let mut writer = Writer::default();
        for distribution in distributions {
            writer.apply_watcher_event(&watcher::Event::Apply(distribution));
        }
        writer.as_reader()
    }

    fn configmap(value: serde_json::Value) -> ConfigMap {
        serde_json::from_value(value).unwrap()
    }

    fn names(refs: &[ObjectRef<Stored<ResourceDistribution>>]) -> Vec<&str> {
        refs.iter().map(|r| r.name.as_str()).collect()
    }

    #[test]
    fn an_owned_copy_triggers_its_cluster_scoped_owner() {
        let map = triggers::<ConfigMap>(ResourceKind::ConfigMap, store(Vec::new()));
        let refs = map(configmap(json!({
            "metadata": {
                "name": "game-demo",
                "namespace": "ns-1",
                "ownerReferences": [
                    {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ResourceDistribution",
                     "name": "sample", "uid": "u", "controller": true},
                    {"apiVersion": "apps.kruise.io/v1beta1", "kind": "ResourceDistribution",
                     "name": "not-controller", "uid": "v"},
                    {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "w",
                     "controller": false},
                ],
            },
        })));
        assert_eq!(names(&refs), ["sample"]);
        // Not in the copy's namespace: the distribution is cluster-scoped.
        assert_eq!(refs[0].namespace, None);
    }

    #[test]
    fn any_object_of_the_distributed_kind_and_name_triggers() {
        let distributions = store(vec![
            distribution("config", "ConfigMap", "game-demo"),
            distribution("secret", "Secret", "game-demo"),
            distribution("other", "ConfigMap", "other"),
        ]);
        let map = triggers::<ConfigMap>(ResourceKind::ConfigMap, distributions.clone());
        let foreign = json!({"metadata": {"name": "game-demo", "namespace": "ns-1"}});
        assert_eq!(names(&map(configmap(foreign))), ["config"]);
        let secrets = triggers::<Secret>(ResourceKind::Secret, distributions);
        let secret: Secret =
            serde_json::from_value(json!({"metadata": {"name": "game-demo", "namespace": "ns-2"}}))
                .unwrap();
        assert_eq!(names(&secrets(secret)), ["secret"]);
        let unrelated = json!({"metadata": {"name": "x", "namespace": "ns-1"}});
        assert!(map(configmap(unrelated)).is_empty());
    }

    #[test]
    fn an_owner_that_also_distributes_the_name_is_triggered_once() {
        let map = triggers::<ConfigMap>(
            ResourceKind::ConfigMap,
            store(vec![distribution("sample", "ConfigMap", "game-demo")]),
        );
        let refs = map(configmap(json!({
            "metadata": {
                "name": "game-demo",
                "namespace": "ns-1",
                "ownerReferences": [
                    {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ResourceDistribution",
                     "name": "sample", "uid": "uid-sample", "controller": true},
                ],
            },
        })));
        assert_eq!(names(&refs), ["sample"]);
    }
}
