//! One reconcile: read, plan (kruise-core), write, report.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kruise_api::{ResourceDistribution, Stored};
use kruise_core::resourcedistribution::{
    Action as Write, Failure, ReconcileInput, needs_status_write, plan, read_resource,
};
use kube::Resource;
use kube::runtime::controller::Action;

use kruise_controller_runtime::context::Context;
use kruise_controller_runtime::status::StatusWrite;

use crate::cluster::{self, ReadError};
use crate::events;

/// Why a reconcile is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("cannot write the status: {0}")]
    Status(#[source] kube::Error),
    #[error("{count} namespace(s) failed, e.g. {example}")]
    Failures { count: usize, example: String },
}

pub(crate) async fn reconcile(
    stored: Arc<Stored<ResourceDistribution>>,
    context: Arc<Context>,
) -> Result<Action, Error> {
    let name = stored.name().to_owned();
    let distribution = match &stored.object {
        Ok(distribution) => distribution,
        Err(reason) => {
            let message = format!("cannot read this ResourceDistribution: {reason}");
            return Ok(invalid(&context, &stored.object_ref(&()), &name, &message).await);
        }
    };
    if distribution.metadata.deletion_timestamp.is_some() {
        // The garbage collector deletes the copies (controller owner
        // references); there is nothing to do here.
        return Ok(Action::await_change());
    }
    let resource = match read_resource(&distribution.spec.resource) {
        Ok(resource) => resource,
        Err(message) => {
            return Ok(invalid(&context, &distribution.object_ref(&()), &name, &message).await);
        }
    };
    let client = &context.client;
    let namespaces = cluster::namespaces(client).await?;
    let existing = cluster::existing(client, &resource).await?;
    let now = Timestamp::now();
    let plan = match plan(&ReconcileInput {
        distribution,
        namespaces: &namespaces,
        existing: &existing,
        now,
    }) {
        Ok(plan) => plan,
        // None of these is mended by trying again (a distribution without a
        // name or uid is not one the API server stored): wait for a change.
        Err(error) => {
            let reference = distribution.object_ref(&());
            return Ok(invalid(&context, &reference, &name, &error.to_string()).await);
        }
    };

    let outcomes = cluster::execute(client, &plan.resource, &plan.actions, &existing).await;
    let done: Vec<&Write> = plan
        .actions
        .iter()
        .zip(&outcomes)
        .filter(|(_, failure)| failure.is_none())
        .map(|(action, _)| action)
        .collect();
    events::writes_done(&context, distribution, &plan.resource, &done).await;
    let action_failures: Vec<Failure> = outcomes.into_iter().flatten().collect();
    events::failures(
        &context,
        distribution,
        &action_failures.iter().collect::<Vec<_>>(),
    )
    .await;

    let status = plan.status_after(distribution, &action_failures, now);
    if needs_status_write(distribution, &status) {
        tracing::info!(
            distribution = %name,
            desired = status.desired,
            succeeded = status.succeeded,
            failed = status.failed,
            "writing the status"
        );
        // Conflicts and missing namespaces are reported once, when the
        // status changes, not on every reconcile.
        events::failures(
            &context,
            distribution,
            &plan.failures.iter().collect::<Vec<_>>(),
        )
        .await;
        let written = cluster::write_status(client, distribution, status)
            .await
            .map_err(Error::Status)?;
        if written == StatusWrite::Stale {
            tracing::debug!(distribution = %name, "read a stale distribution; its update comes next");
        }
    }

    if plan.needs_retry(&action_failures) {
        let retried: Vec<&Failure> = plan
            .failures
            .iter()
            .chain(&action_failures)
            .filter(|f| f.needs_retry())
            .collect();
        let example = retried
            .first()
            .map(|f| format!("{} ({:?}): {}", f.namespace, f.condition, f.message))
            .unwrap_or_default();
        return Err(Error::Failures {
            count: retried.len(),
            example,
        });
    }
    context.backoff.reset(&name);
    Ok(Action::await_change())
}

/// The signature kube's `Controller::run` asks for.
#[allow(clippy::needless_pass_by_value)]
pub(crate) fn error_policy(
    distribution: Arc<Stored<ResourceDistribution>>,
    error: &Error,
    context: Arc<Context>,
) -> Action {
    let name = distribution.name();
    let delay = context.backoff.next(name);
    tracing::warn!(distribution = name, %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// Logs and reports a distribution that cannot be planned; it waits for a
/// new spec.
async fn invalid(
    context: &Context,
    distribution: &ObjectReference,
    name: &str,
    message: &str,
) -> Action {
    tracing::warn!(
        distribution = name,
        message,
        "cannot distribute; waiting for a new spec"
    );
    events::invalid_spec(context, distribution, message).await;
    context.backoff.reset(name);
    Action::await_change()
}

/// One reconcile round against an in-memory API server ([`FakeApi`]): the
/// copies it creates, restores and deletes in the namespaces, the foreign
/// objects it leaves alone, and the status it writes for each case.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use kruise_api::resourcedistribution::{
        ResourceDistributionConditionType as ConditionType, ResourceDistributionStatus,
    };
    use kruise_controller_runtime::testing::FakeApi;
    use kruise_core::resourcedistribution::{
        MESSAGE_CONFLICT, MESSAGE_NAMESPACE_NOT_EXISTS, REASON_SUCCEEDED, RESOURCE_FROM_ANNOTATION,
        RESOURCE_HASH_ANNOTATION, resource_hash,
    };
    use kube::Api;
    use kube::api::{Patch, PatchParams};
    use serde_json::{Value, json};

    use super::*;
    use crate::CONTROLLER_NAME;

    const DISTRIBUTION: &str = "/apis/apps.kruise.io/v1alpha1/resourcedistributions/sample";

    fn copy_path(namespace: &str) -> String {
        format!("/api/v1/namespaces/{namespace}/configmaps/game-demo")
    }

    /// The ConfigMap of policies/fixtures/examples/resourcedistribution.yaml.
    fn resource() -> Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "game-demo"},
            "data": {"player_initial_lives": "3", "ui_properties_file_name": "user-interface.properties"},
        })
    }

    /// The example's distribution: ns-1, ns-4 and every namespace labelled
    /// group=test, except ns-3.
    fn sample() -> Value {
        json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ResourceDistribution",
            "metadata": {"name": "sample", "uid": "rd-uid", "generation": 1},
            "spec": {
                "resource": resource(),
                "targets": {
                    "includedNamespaces": {"list": [{"name": "ns-1"}, {"name": "ns-4"}]},
                    "namespaceLabelSelector": {"matchLabels": {"group": "test"}},
                    "excludedNamespaces": {"list": [{"name": "ns-3"}]},
                },
            },
        })
    }

    fn namespace(api: &FakeApi, name: &str, labels: &Value) {
        api.insert(
            "namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": name, "labels": labels}}),
        );
    }

    /// ns-1 (listed), ns-2 and ns-3 (labelled, ns-3 excluded), kube-system
    /// (labelled, never a target) and the distribution; ns-4 is missing.
    fn cluster() -> FakeApi {
        let api = FakeApi::default();
        namespace(&api, "ns-1", &json!({}));
        namespace(&api, "ns-2", &json!({"group": "test"}));
        namespace(&api, "ns-3", &json!({"group": "test"}));
        namespace(&api, "kube-system", &json!({"group": "test"}));
        api.insert("resourcedistributions", sample());
        api
    }

    /// One reconcile of the distribution as the API server holds it now.
    async fn round_on(api: &FakeApi) -> Result<Action, Error> {
        let stored: Stored<ResourceDistribution> =
            serde_json::from_value(api.get(DISTRIBUTION).unwrap()).unwrap();
        reconcile(
            Arc::new(stored),
            Arc::new(Context::new(api.client(), CONTROLLER_NAME)),
        )
        .await
    }

    #[tokio::test]
    async fn a_distribution_without_a_uid_is_refused_once_not_retried() {
        let api = cluster();
        let mut unsaved = sample();
        unsaved["metadata"]["uid"] = Value::Null;
        let stored: Stored<ResourceDistribution> = serde_json::from_value(unsaved).unwrap();
        let action = reconcile(
            Arc::new(stored),
            Arc::new(Context::new(api.client(), CONTROLLER_NAME)),
        )
        .await
        .unwrap();
        assert_eq!(action, Action::await_change());
        let configmap_writes = api
            .writes()
            .into_iter()
            .filter(|w| w.path.contains("/configmaps"))
            .count();
        assert_eq!(configmap_writes, 0, "no copy without an owner uid");
    }

    fn status(api: &FakeApi) -> ResourceDistributionStatus {
        let stored: Stored<ResourceDistribution> =
            serde_json::from_value(api.get(DISTRIBUTION).unwrap()).unwrap();
        stored.object.unwrap().status.unwrap()
    }

    /// `(status, reason, failed namespaces)` of one condition.
    fn condition(
        status: &ResourceDistributionStatus,
        type_: ConditionType,
    ) -> (&str, &str, Vec<&str>) {
        let condition = status.conditions.iter().find(|c| c.type_ == type_).unwrap();
        (
            condition.status.as_str(),
            condition.reason.as_deref().unwrap_or_default(),
            condition
                .failed_namespaces
                .iter()
                .map(String::as_str)
                .collect(),
        )
    }

    /// The methods of the writes to ConfigMaps in `namespace`.
    fn writes_in(api: &FakeApi, namespace: &str) -> Vec<String> {
        let collection = format!("/api/v1/namespaces/{namespace}/configmaps");
        api.writes()
            .into_iter()
            .filter(|w| w.path.starts_with(&collection))
            .map(|w| w.method)
            .collect()
    }

    #[tokio::test]
    async fn each_target_namespace_gets_an_owned_copy_and_the_status_counts_the_missing_one() {
        let api = cluster();
        assert_eq!(round_on(&api).await.unwrap(), Action::await_change());

        for ns in ["ns-1", "ns-2"] {
            let copy = api.get(&copy_path(ns)).unwrap();
            assert_eq!(copy["data"], resource()["data"], "{ns}");
            let annotations = &copy["metadata"]["annotations"];
            assert_eq!(annotations[RESOURCE_FROM_ANNOTATION], "sample", "{ns}");
            assert_eq!(
                annotations[RESOURCE_HASH_ANNOTATION],
                resource_hash(&resource()).as_str(),
                "{ns}"
            );
            let owners = &copy["metadata"]["ownerReferences"];
            assert_eq!(owners.as_array().unwrap().len(), 1, "{ns}");
            assert_eq!(owners[0]["uid"], "rd-uid", "{ns}");
            assert_eq!(owners[0]["kind"], "ResourceDistribution", "{ns}");
            assert_eq!(owners[0]["controller"], true, "{ns}");
        }
        // Excluded, never a target, and missing.
        for ns in ["ns-3", "kube-system", "ns-4"] {
            assert_eq!(api.get(&copy_path(ns)), None, "{ns}");
        }

        let status = status(&api);
        assert_eq!(
            (status.desired, status.succeeded, status.failed),
            (3, 2, 1),
            "ns-1, ns-2 and the missing ns-4"
        );
        assert_eq!(status.observed_generation, Some(1));
        assert_eq!(
            condition(&status, ConditionType::NamespaceNotExists),
            ("True", MESSAGE_NAMESPACE_NOT_EXISTS, vec!["ns-4"])
        );
        assert_eq!(
            condition(&status, ConditionType::CreateResourceFailed),
            ("False", REASON_SUCCEEDED, vec![])
        );

        // A second round finds everything in place: no write, no event,
        // and the unchanged status is not written again.
        let before = api.writes().len();
        assert_eq!(round_on(&api).await.unwrap(), Action::await_change());
        assert_eq!(api.writes().len(), before);
    }

    #[tokio::test]
    async fn a_namespace_that_stops_matching_has_its_copy_deleted() {
        let api = cluster();
        round_on(&api).await.unwrap();
        let uid = api.get(&copy_path("ns-2")).unwrap()["metadata"]["uid"].clone();

        let namespaces: Api<Namespace> = Api::all(api.client());
        let unlabelled = json!({"metadata": {"labels": {"group": null}}});
        namespaces
            .patch("ns-2", &PatchParams::default(), &Patch::Merge(&unlabelled))
            .await
            .unwrap();
        assert_eq!(round_on(&api).await.unwrap(), Action::await_change());

        assert_eq!(api.get(&copy_path("ns-2")), None);
        assert!(api.get(&copy_path("ns-1")).is_some());
        let delete = api
            .writes()
            .into_iter()
            .find(|w| w.method == "DELETE")
            .unwrap();
        assert_eq!(delete.path, copy_path("ns-2"));
        assert_eq!(delete.body["preconditions"]["uid"], uid);
        let status = status(&api);
        assert_eq!((status.desired, status.succeeded, status.failed), (2, 1, 1));
        assert_eq!(
            condition(&status, ConditionType::DeleteResourceFailed),
            ("False", REASON_SUCCEEDED, vec![])
        );
    }

    #[tokio::test]
    async fn a_same_named_object_the_distribution_does_not_own_is_left_alone_as_a_conflict() {
        let api = cluster();
        let foreign = api.insert(
            "configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "game-demo", "namespace": "ns-1"},
                   "data": {"mine": "yes"}}),
        );
        // A conflict waits for the object to change: no retry.
        assert_eq!(round_on(&api).await.unwrap(), Action::await_change());

        assert_eq!(api.get(&copy_path("ns-1")).unwrap(), foreign);
        assert!(
            writes_in(&api, "ns-1").is_empty(),
            "nothing written in ns-1"
        );
        assert_eq!(
            api.get(&copy_path("ns-2")).unwrap()["metadata"]["ownerReferences"][0]["uid"],
            "rd-uid"
        );
        let status = status(&api);
        assert_eq!((status.desired, status.succeeded, status.failed), (3, 1, 2));
        assert_eq!(
            condition(&status, ConditionType::ConflictOccurred),
            ("True", MESSAGE_CONFLICT, vec!["ns-1"])
        );
        let events: Vec<Value> = api
            .writes()
            .into_iter()
            .filter(|w| w.path.ends_with("/events"))
            .map(|w| w.body["reason"].clone())
            .collect();
        assert!(events.contains(&json!("ConflictOccurred")), "{events:?}");
    }

    #[tokio::test]
    async fn a_copy_edited_by_hand_is_restored_and_keeps_its_own_labels() {
        let api = cluster();
        round_on(&api).await.unwrap();
        let configmaps: Api<ConfigMap> = Api::namespaced(api.client(), "ns-1");
        let edit = json!({"metadata": {"labels": {"team": "a"}},
                          "data": {"player_initial_lives": "99"}});
        configmaps
            .patch("game-demo", &PatchParams::default(), &Patch::Merge(&edit))
            .await
            .unwrap();

        assert_eq!(round_on(&api).await.unwrap(), Action::await_change());

        let copy = api.get(&copy_path("ns-1")).unwrap();
        assert_eq!(copy["data"], resource()["data"]);
        assert_eq!(copy["metadata"]["labels"], json!({"team": "a"}));
        assert_eq!(
            writes_in(&api, "ns-1"),
            ["POST", "PATCH", "PUT"],
            "the create, the test's edit, then one replace"
        );
        assert_eq!(
            writes_in(&api, "ns-2"),
            ["POST"],
            "created once, never rewritten"
        );
    }
}
