//! One round for one pod: read, plan, write.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kruise_controller_runtime::api_error::{is_already_exists, is_conflict, is_not_found};
use kruise_core::launch_priority::{
    BarrierPlan, BarrierStep, COMPLETED_ANNOTATION, awaits_barrier, barrier_config_map_name,
    containers_gated_on, plan_barrier,
};
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::Instrument;

use crate::{CONTROLLER_NAME, Context, RESYNC, pod_key};

/// Plans in one round at most: a create or a stale replacement is followed
/// by a fresh read and plan; anything left waits for the next round.
const PLANS_PER_ROUND: usize = 3;

/// A read or write the round could not do; retried with backoff.
pub use kruise_controller_runtime::api_error::ApiFailure as Error;
use kruise_controller_runtime::api_error::failed;

pub(crate) async fn reconcile(pod: Arc<Pod>, context: Arc<Context>) -> Result<Action, Error> {
    // Most pods are not gated, or done: decided from the watch cache alone.
    if !awaits_barrier(&pod) {
        return Ok(Action::await_change());
    }
    let key = pod_key(&pod);
    let span = tracing::info_span!("reconcile", controller = CONTROLLER_NAME, pod = %key);
    let action = round(&pod, &context).instrument(span).await?;
    context.backoff.reset(&key);
    Ok(action)
}

async fn round(cached: &Pod, context: &Context) -> Result<Action, Error> {
    let namespace = cached.namespace().unwrap_or_default();
    let name = cached.name_any();
    let pods: Api<Pod> = Api::namespaced(context.client.clone(), &namespace);
    let config_maps: Api<ConfigMap> = Api::namespaced(context.client.clone(), &namespace);
    let barrier_name = barrier_config_map_name(&name);
    // Fresh reads: the cache may lag behind kubelet's readiness reports.
    let Some(pod) = pods.get_opt(&name).await.map_err(failed("read the pod"))? else {
        return Ok(Action::await_change());
    };
    for _ in 0..PLANS_PER_ROUND {
        let barrier = config_maps
            .get_opt(&barrier_name)
            .await
            .map_err(failed("read the barrier ConfigMap"))?;
        match plan_barrier(&pod, barrier.as_ref()) {
            BarrierPlan::Ignore => return Ok(Action::await_change()),
            BarrierPlan::Create => create_barrier(&config_maps, &pod, &barrier_name).await?,
            BarrierPlan::ReplaceStale { uid } => {
                delete_stale(&config_maps, &barrier_name, uid).await?;
                context
                    .events
                    .warning(
                        &pod.object_ref(&()),
                        "StaleBarrierReplaced",
                        "Replace",
                        &format!("{barrier_name} belonged to an earlier pod of this name"),
                    )
                    .await;
            }
            BarrierPlan::Step(step) => {
                return execute_step(context, &pods, &config_maps, &pod, barrier, step).await;
            }
        }
    }
    Ok(Action::requeue(RESYNC))
}

async fn execute_step(
    context: &Context,
    pods: &Api<Pod>,
    config_maps: &Api<ConfigMap>,
    pod: &Pod,
    barrier: Option<ConfigMap>,
    step: BarrierStep,
) -> Result<Action, Error> {
    let (key, last) = match step {
        BarrierStep::Wait => return Ok(Action::requeue(RESYNC)),
        BarrierStep::Complete => {
            mark_completed(pods, pod).await?;
            return Ok(Action::await_change());
        }
        BarrierStep::Release(key) => (key, false),
        BarrierStep::ReleaseLast(key) => (key, true),
    };
    let barrier = barrier.unwrap_or_default();
    release(config_maps, &barrier, &key).await?;
    let note = format!(
        "released {key}: {} may start",
        containers_gated_on(pod, &key).join(", ")
    );
    context
        .events
        .normal(&pod.object_ref(&()), "PriorityReleased", "Release", &note)
        .await;
    if last {
        mark_completed(pods, pod).await?;
        return Ok(Action::await_change());
    }
    Ok(Action::requeue(RESYNC))
}

/// The empty ConfigMap, owned (not controlled) by the pod, as OpenKruise
/// makes it. Someone else having made it first is fine.
async fn create_barrier(config_maps: &Api<ConfigMap>, pod: &Pod, name: &str) -> Result<(), Error> {
    let owner = OwnerReference {
        api_version: "v1".to_owned(),
        kind: "Pod".to_owned(),
        name: pod.name_any(),
        uid: pod.uid().unwrap_or_default(),
        controller: None,
        block_owner_deletion: None,
    };
    let config_map = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    let params = PostParams {
        field_manager: Some(CONTROLLER_NAME.to_owned()),
        ..PostParams::default()
    };
    match config_maps.create(&params, &config_map).await {
        Err(error) if !is_already_exists(&error) => {
            Err(failed("create the barrier ConfigMap")(error))
        }
        _ => Ok(()),
    }
}

async fn delete_stale(config_maps: &Api<ConfigMap>, name: &str, uid: String) -> Result<(), Error> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match config_maps.delete(name, &params).await {
        // Gone already, or replaced by someone else: the next plan sees it.
        Err(error) if !is_not_found(&error) && !is_conflict(&error) => {
            Err(failed("delete a stale barrier ConfigMap")(error))
        }
        _ => Ok(()),
    }
}

/// Adds `key` to the ConfigMap read in this round; its uid in the patch
/// makes the API server refuse it if the ConfigMap was replaced meanwhile.
async fn release(
    config_maps: &Api<ConfigMap>,
    barrier: &ConfigMap,
    key: &str,
) -> Result<(), Error> {
    let patch = json!({
        "metadata": {"uid": barrier.metadata.uid},
        "data": {key: "true"},
    });
    config_maps
        .patch(&barrier.name_any(), &patch_params(), &Patch::Merge(&patch))
        .await
        .map(drop)
        .map_err(failed("release a priority level"))
}

async fn mark_completed(pods: &Api<Pod>, pod: &Pod) -> Result<(), Error> {
    let patch = json!({
        "metadata": {
            "uid": pod.metadata.uid,
            "annotations": {COMPLETED_ANNOTATION: "true"},
        },
    });
    pods.patch(&pod.name_any(), &patch_params(), &Patch::Merge(&patch))
        .await
        .map(drop)
        .map_err(failed("mark the pod completed"))
}

fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(CONTROLLER_NAME.to_owned()),
        ..PatchParams::default()
    }
}

/// Rounds against an in-memory API server: what the controller writes for
/// an ordered pod, level by level, and for a barrier left by a namesake.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use kruise_controller_runtime::testing::FakeApi;
    use serde_json::Value;

    use super::*;

    const POD: &str = "/api/v1/namespaces/default/pods/web";
    const BARRIER: &str = "/api/v1/namespaces/default/configmaps/web-barrier";

    /// A pod as the webhook leaves it: `sidecar` gated on p_1, `main` on p_0.
    fn ordered_pod() -> Value {
        let gated = |name: &str, key: &str| {
            json!({"name": name, "image": "busybox", "env": [{
                "name": "KRUISE_CONTAINER_BARRIER",
                "valueFrom": {"configMapKeyRef": {"name": "web-barrier", "key": key}},
            }]})
        };
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "uid": "pod-uid",
                         "annotations": {"apps.kruise.io/container-launch-priority": "Ordered"}},
            "spec": {"containers": [gated("sidecar", "p_1"), gated("main", "p_0")]},
        })
    }

    fn context(api: &FakeApi) -> Arc<Context> {
        Arc::new(Context::new(api.client(), CONTROLLER_NAME))
    }

    async fn round_on(api: &FakeApi) -> Action {
        let pod: Pod = serde_json::from_value(api.get(POD).unwrap()).unwrap();
        reconcile(Arc::new(pod), context(api)).await.unwrap()
    }

    async fn set_ready(api: &FakeApi, container: &str) {
        let pods: Api<Pod> = Api::namespaced(api.client(), "default");
        let status = json!({"status": {"containerStatuses": [{
            "name": container, "ready": true, "image": "busybox", "imageID": "",
            "restartCount": 0,
        }]}});
        pods.patch_status("web", &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn levels_are_released_highest_first_then_the_pod_completed() {
        let api = FakeApi::default();
        api.insert("pods", ordered_pod());

        assert_eq!(round_on(&api).await, Action::requeue(RESYNC));
        let barrier = api.get(BARRIER).unwrap();
        assert_eq!(barrier["metadata"]["ownerReferences"][0]["uid"], "pod-uid");
        assert_eq!(barrier["data"], json!({"p_1": "true"}));

        // Until the sidecar is ready, nothing more is released.
        assert_eq!(round_on(&api).await, Action::requeue(RESYNC));
        assert_eq!(api.get(BARRIER).unwrap()["data"], json!({"p_1": "true"}));

        set_ready(&api, "sidecar").await;
        assert_eq!(round_on(&api).await, Action::await_change());
        assert_eq!(
            api.get(BARRIER).unwrap()["data"],
            json!({"p_1": "true", "p_0": "true"})
        );
        let pod = api.get(POD).unwrap();
        assert_eq!(pod["metadata"]["annotations"][COMPLETED_ANNOTATION], "true");
        let events: Vec<_> = api
            .writes()
            .into_iter()
            .filter(|w| w.path.ends_with("/events"))
            .map(|w| w.body["reason"].clone())
            .collect();
        assert_eq!(events, ["PriorityReleased", "PriorityReleased"]);

        // A completed pod is never looked at again: no request at all.
        let before = api.seen().len();
        assert_eq!(round_on(&api).await, Action::await_change());
        assert_eq!(api.seen().len(), before);
    }

    #[tokio::test]
    async fn a_barrier_left_by_an_earlier_pod_of_the_name_is_made_anew() {
        let api = FakeApi::default();
        api.insert("pods", ordered_pod());
        api.insert(
            "configmaps",
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "web-barrier", "namespace": "default", "uid": "old-barrier",
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod",
                                                  "name": "web", "uid": "earlier-pod"}]},
                "data": {"p_1": "true", "p_0": "true"},
            }),
        );
        round_on(&api).await;
        let barrier = api.get(BARRIER).unwrap();
        assert_ne!(barrier["metadata"]["uid"], "old-barrier");
        assert_eq!(barrier["metadata"]["ownerReferences"][0]["uid"], "pod-uid");
        assert_eq!(
            barrier["data"],
            json!({"p_1": "true"}),
            "only the first level"
        );
        let deleted = api
            .writes()
            .into_iter()
            .find(|w| w.method == "DELETE")
            .unwrap();
        assert_eq!(deleted.body["preconditions"]["uid"], "old-barrier");
    }
}
