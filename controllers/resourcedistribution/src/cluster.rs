//! The reads and writes of one reconcile; no decisions.

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kruise_api::ResourceDistribution;
use kruise_api::resourcedistribution::ResourceDistributionStatus;
use kruise_core::resourcedistribution::{
    Action, Existing, Failure, NamespaceInfo, ResourceIdentity, ResourceKind,
};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, PostParams, Preconditions, TypeMeta,
};
use kube::{Api, Client};
use serde_json::Value;

use kruise_controller_runtime::api_error::is_not_found;
use kruise_controller_runtime::status::{StatusWrite, replace_status};

use crate::FIELD_MANAGER;

/// How many writes of one reconcile run at once.
const WRITE_CONCURRENCY: usize = 8;

#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error("cannot list the namespaces: {0}")]
    Namespaces(#[source] kube::Error),
    #[error("cannot list the {kind} objects named {name}: {source}")]
    Copies {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Every namespace of the cluster, as the planner sees it.
pub(crate) async fn namespaces(client: &Client) -> Result<Vec<NamespaceInfo>, ReadError> {
    let list = Api::<Namespace>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(ReadError::Namespaces)?;
    Ok(list.items.into_iter().map(namespace_info).collect())
}

fn namespace_info(namespace: Namespace) -> NamespaceInfo {
    let terminating = namespace.metadata.deletion_timestamp.is_some()
        || namespace
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|phase| phase == "Terminating");
    NamespaceInfo {
        name: namespace.metadata.name.unwrap_or_default(),
        labels: namespace.metadata.labels.unwrap_or_default(),
        terminating,
    }
}

/// The objects of the distributed kind and name, per namespace: one list
/// across all namespaces with a `metadata.name` field selector (a
/// consistent read, not a cache), rather than one GET per namespace.
pub(crate) async fn existing(
    client: &Client,
    resource: &ResourceIdentity,
) -> Result<BTreeMap<String, Existing>, ReadError> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &api_resource(resource.kind));
    let params = ListParams::default().fields(&format!("metadata.name={}", resource.name));
    let list = api
        .list(&params)
        .await
        .map_err(|source| ReadError::Copies {
            kind: resource.kind.as_str(),
            name: resource.name.clone(),
            source,
        })?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|mut object| {
            let namespace = object.metadata.namespace.clone()?;
            // List items come without apiVersion and kind.
            object.types = Some(TypeMeta {
                api_version: resource.api_version.clone(),
                kind: resource.kind.as_str().to_owned(),
            });
            let existing = match serde_json::to_value(&object) {
                Ok(value) => Existing::Found(value),
                Err(error) => Existing::ReadFailed(format!("cannot encode the object: {error}")),
            };
            Some((namespace, existing))
        })
        .collect())
}

/// Performs the planned writes (a few at a time): per action, in the
/// plan's order, `None` when it succeeded or the failure to report.
pub(crate) async fn execute(
    client: &Client,
    resource: &ResourceIdentity,
    actions: &[Action],
    existing: &BTreeMap<String, Existing>,
) -> Vec<Option<Failure>> {
    // The futures are built before they are streamed: a closure over
    // borrowed actions inside the stream trips the compiler's Send
    // inference for the controller's future.
    let writes: Vec<_> = actions
        .iter()
        .enumerate()
        .map(|(index, action)| async move {
            let outcome = write(client, resource, action, existing).await;
            (index, outcome.err().map(|message| action.failed(message)))
        })
        .collect();
    let mut outcomes: Vec<(usize, Option<Failure>)> = futures::stream::iter(writes)
        .buffer_unordered(WRITE_CONCURRENCY)
        .collect()
        .await;
    outcomes.sort_by_key(|(index, _)| *index);
    outcomes.into_iter().map(|(_, outcome)| outcome).collect()
}

async fn write(
    client: &Client,
    resource: &ResourceIdentity,
    action: &Action,
    existing: &BTreeMap<String, Existing>,
) -> Result<(), String> {
    let namespace = action.namespace();
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &api_resource(resource.kind));
    let post = PostParams {
        dry_run: false,
        field_manager: Some(FIELD_MANAGER.to_owned()),
    };
    let result = match action {
        Action::Create { object, .. } => {
            let object = decode(object)?;
            api.create(&post, &object).await.map(|_| ())
        }
        Action::Update { object, .. } => {
            let object = decode(object)?;
            api.replace(&resource.name, &post, &object)
                .await
                .map(|_| ())
        }
        Action::Delete { .. } => {
            // Only the object that was read (and found to be ours) goes.
            let uid = match existing.get(namespace) {
                Some(Existing::Found(object)) => object
                    .pointer("/metadata/uid")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                _ => None,
            };
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid,
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match api.delete(&resource.name, &params).await {
                Err(error) if is_not_found(&error) => Ok(()),
                other => other.map(|_| ()),
            }
        }
    };
    match result {
        Ok(()) => {
            tracing::info!(
                namespace,
                kind = resource.kind.as_str(),
                name = %resource.name,
                action = verb(action),
                "wrote a copy"
            );
            Ok(())
        }
        Err(error) => {
            tracing::warn!(
                namespace,
                kind = resource.kind.as_str(),
                name = %resource.name,
                action = verb(action),
                %error,
                "a write failed"
            );
            Err(message(&error))
        }
    }
}

/// Replaces the whole status, guarded by the resourceVersion read. A
/// stale write (409) is no failure: the distribution's watch event brings
/// the new version, and a reconcile with it.
pub(crate) async fn write_status(
    client: &Client,
    distribution: &ResourceDistribution,
    status: ResourceDistributionStatus,
) -> Result<StatusWrite, kube::Error> {
    let api: Api<ResourceDistribution> = Api::all(client.clone());
    let mut updated = distribution.clone();
    updated.status = Some(status);
    replace_status(&api, &updated, FIELD_MANAGER).await
}

pub(crate) fn verb(action: &Action) -> &'static str {
    match action {
        Action::Create { .. } => "create",
        Action::Update { .. } => "update",
        Action::Delete { .. } => "delete",
    }
}

fn api_resource(kind: ResourceKind) -> ApiResource {
    match kind {
        ResourceKind::Secret => ApiResource::erase::<Secret>(&()),
        ResourceKind::ConfigMap => ApiResource::erase::<ConfigMap>(&()),
    }
}

fn decode(object: &Value) -> Result<DynamicObject, String> {
    serde_json::from_value(object.clone())
        .map_err(|error| format!("cannot encode the copy: {error}"))
}

/// The API server's message when there is one (what the status shows).
fn message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn namespace(value: Value) -> NamespaceInfo {
        namespace_info(serde_json::from_value(value).unwrap())
    }

    #[test]
    fn namespaces_are_read_with_labels_and_termination() {
        let active = namespace(json!({"metadata": {"name": "a", "labels": {"group": "test"}}}));
        assert_eq!(active, NamespaceInfo::new("a").with_label("group", "test"));
        let deleting = namespace(json!({
            "metadata": {"name": "b", "deletionTimestamp": "2026-01-01T00:00:00Z"},
        }));
        assert!(deleting.terminating);
        let terminating = namespace(json!({
            "metadata": {"name": "c"},
            "status": {"phase": "Terminating"},
        }));
        assert!(terminating.terminating);
    }
}
