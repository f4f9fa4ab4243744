//! ContainerRecreateRequest: ask kruise-daemon to kill and let kubelet
//! recreate some containers of one pod, without touching the pod itself.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ContainerPort, ExecAction, HTTPGetAction, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::common::{is_false, is_zero};
use crate::object::{KruiseObject, kruise_kind};

/// Label the webhook sets to `"true"` on create; the controller removes it on
/// completion, and the daemon only watches CRRs that carry it.
pub const ACTIVE_LABEL: &str = "crr.apps.kruise.io/active";
/// Label holding the UID of the target pod (set by the webhook, immutable).
pub const POD_UID_LABEL: &str = "crr.apps.kruise.io/pod-uid";
/// Label holding the node of the target pod (set by the webhook, immutable).
pub const NODE_NAME_LABEL: &str = "crr.apps.kruise.io/node-name";
/// Finalizer marking that this CRR holds the pod not-ready, and annotation
/// with the time (RFC 3339) it started to: the not-ready grace counts from
/// it, and it never changes once set.
pub const UNREADY_ACQUIRED_KEY: &str = "crr.apps.kruise.io/unready-acquired";
/// Annotation with the controller's container-status snapshot: a JSON list
/// of [`ContainerStatusSnapshot`].
pub const SYNC_CONTAINER_STATUSES_ANNOTATION: &str = "crr.apps.kruise.io/sync-container-statuses";

kruise_kind! {
    /// A ContainerRecreateRequest (`kubectl get crr`).
    ContainerRecreateRequest {
        spec: ContainerRecreateRequestSpec,
        status: ContainerRecreateRequestStatus,
        plural: "containerrecreaterequests",
        scope: NamespaceResourceScope,
    }
}

/// What to recreate and how. Immutable once created.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateRequestSpec {
    /// The pod, in this request's namespace, whose containers are recreated.
    pub pod_name: String,
    /// The containers to recreate, in order; at least one.
    pub containers: Vec<ContainerRecreateRequestContainer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<ContainerRecreateRequestStrategy>,
    /// Seconds after creation before the request is given up (at least 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    /// Seconds after completion before the request is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
}

/// One container to recreate. Everything but the name is filled in by the
/// webhook from the pod and may not be set by users.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateRequestContainer {
    /// A container of `pod.spec.containers` (not an init container).
    pub name: String,
    /// The container's preStop hook, copied from the pod (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_stop: Option<ProbeHandler>,
    /// The container's ports, copied when preStop is an HTTP GET (read-only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "container_ports")]
    pub ports: Vec<ContainerPort>,
    /// The container's ID and restart count at creation (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_context: Option<ContainerRecreateRequestContainerContext>,
}

/// A hook action: exactly one of exec, httpGet or tcpSocket.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProbeHandler {
    /// Run a command in the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "exec_action")]
    pub exec: Option<ExecAction>,
    /// Send an HTTP GET to the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "http_get_action")]
    pub http_get: Option<HTTPGetAction>,
    /// Open a TCP connection to the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "tcp_socket_action")]
    pub tcp_socket: Option<TCPSocketAction>,
}

/// The container instance the request was made against.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateRequestContainerContext {
    /// Runtime-prefixed ID, e.g. `containerd://<id>`.
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub restart_count: i32,
}

/// How the containers are recreated.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateRequestStrategy {
    /// Fail (default) finishes the request on the first failed container;
    /// Ignore goes on with the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub failure_policy: Option<ContainerRecreateRequestFailurePolicy>,
    /// Recreate the next container only once the previous one has been
    /// recreated and counts as succeeded. Unset means false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordered_recreate: Option<bool>,
    /// Kill the container even if it restarted since the request was made.
    /// Unset means false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_recreate: Option<bool>,
    /// Seconds the container gets to stop; defaults to the pod's grace period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    /// Seconds the pod is held not-ready before its containers are stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unready_grace_period_seconds: Option<i64>,
    /// Seconds the new container must run (and be ready) to count as succeeded.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub min_started_seconds: i32,
}

/// What a container failure does to the rest of the request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ContainerRecreateRequestFailurePolicy {
    /// Complete the request at once.
    #[default]
    Fail,
    /// Carry on with the remaining containers.
    Ignore,
}

/// Phase of the whole request and of each container in it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ContainerRecreateRequestPhase {
    /// Waiting (behind another request for the same pod, or to be killed).
    #[default]
    Pending,
    /// Being killed or restarted.
    Recreating,
    /// The container's new instance is up (per-container only).
    Succeeded,
    /// The container could not be recreated (per-container only).
    Failed,
    /// The request is finished (whole request only).
    Completed,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateRequestStatus {
    /// Pending, Recreating or Completed.
    #[schemars(with = "String")]
    pub phase: ContainerRecreateRequestPhase,
    /// When the request completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::date_time")]
    pub completion_time: Option<Time>,
    /// Why the request completed abnormally; empty otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// One entry per spec container, in spec order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub container_recreate_states: Vec<ContainerRecreateRequestContainerRecreateState>,
}

/// One container of the pod, as the controller saw it: an item of the
/// [`SYNC_CONTAINER_STATUSES_ANNOTATION`] list. (OpenKruise's v1beta1 keeps
/// the same list in its status; v1alpha1, this API, in the annotation.)
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatusSnapshot {
    pub name: String,
    pub ready: bool,
    pub restart_count: i32,
    #[serde(
        rename = "containerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub container_id: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateRequestContainerRecreateState {
    pub name: String,
    /// Pending, Recreating, Succeeded or Failed.
    #[schemars(with = "String")]
    pub phase: ContainerRecreateRequestPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The daemon has killed this container.
    #[serde(default, skip_serializing_if = "is_false")]
    pub is_killed: bool,
}

impl KruiseObject for ContainerRecreateRequest {
    /// The pod-independent part of OpenKruise's CRR create webhook: an empty
    /// strategy, failurePolicy Fail, and the `active` label (which the
    /// webhook always sets to "true"). The node-name and pod-uid labels, the
    /// grace period taken from the pod and the copied preStop, ports and
    /// status context need the pod and are left to the webhook.
    fn set_defaults(&mut self) {
        let strategy = self.spec.strategy.get_or_insert_with(Default::default);
        strategy
            .failure_policy
            .get_or_insert(ContainerRecreateRequestFailurePolicy::Fail);
        self.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(ACTIVE_LABEL.to_owned(), "true".to_owned());
    }
}

/// `[]corev1.ContainerPort`, as OpenKruise's CRD has it.
fn container_ports(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "containerPort": { "type": "integer", "format": "int32" },
                "hostIP": { "type": "string" },
                "hostPort": { "type": "integer", "format": "int32" },
                "name": { "type": "string" },
                "protocol": { "type": "string", "default": "TCP" }
            },
            "required": ["containerPort"]
        }
    })
}

/// `corev1.ExecAction`.
fn exec_action(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "properties": {
            "command": {
                "type": "array",
                "items": { "type": "string" },
                "x-kubernetes-list-type": "atomic"
            }
        }
    })
}

/// `corev1.HTTPGetAction`.
fn http_get_action(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "properties": {
            "host": { "type": "string" },
            "httpHeaders": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": { "type": "string" },
                        "value": { "type": "string" }
                    },
                    "required": ["name", "value"]
                },
                "x-kubernetes-list-type": "atomic"
            },
            "path": { "type": "string" },
            "port": {
                "anyOf": [{ "type": "integer" }, { "type": "string" }],
                "x-kubernetes-int-or-string": true
            },
            "scheme": { "type": "string" }
        },
        "required": ["port"]
    })
}

/// `corev1.TCPSocketAction`.
fn tcp_socket_action(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "properties": {
            "host": { "type": "string" },
            "port": {
                "anyOf": [{ "type": "integer" }, { "type": "string" }],
                "x-kubernetes-int-or-string": true
            }
        },
        "required": ["port"]
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::object::ParseError;
    use crate::object::test_support;

    fn parse(text: &str) -> Result<ContainerRecreateRequest, ParseError> {
        test_support::parse(text)
    }

    fn field_error_path(text: &str) -> String {
        test_support::field_error_path::<ContainerRecreateRequest>(text)
    }

    const EXAMPLE: &str = include_str!("../../fixtures/examples/crr-demo.yaml");

    const MINIMAL: &str = "
apiVersion: apps.kruise.io/v1alpha1
kind: ContainerRecreateRequest
metadata: {name: r, namespace: default}
spec:
  podName: web-0
  containers: [{name: app}]
";

    #[test]
    fn example_round_trips() {
        let crr = parse(EXAMPLE).expect("example parses");
        assert_eq!(crr.spec.pod_name, "pod-name");
        assert_eq!(crr.spec.containers.len(), 2);
        let strategy = crr.spec.strategy.as_ref().expect("strategy");
        assert_eq!(
            strategy.failure_policy,
            Some(ContainerRecreateRequestFailurePolicy::Fail)
        );
        assert_eq!(strategy.ordered_recreate, Some(false));
        assert_eq!(strategy.min_started_seconds, 10);
        let original: serde_json::Value = serde_yaml::from_str(EXAMPLE).unwrap();
        assert_eq!(serde_json::to_value(&crr).unwrap(), original);
    }

    #[test]
    fn status_round_trips() {
        let text = format!(
            "{MINIMAL}status:
  phase: Completed
  completionTime: \"2024-05-01T10:00:00Z\"
  containerRecreateStates:
  - {{name: app, phase: Succeeded, isKilled: true}}
  - {{name: side, phase: Failed, message: boom}}
"
        );
        let crr = parse(&text).unwrap();
        let status = crr.status.as_ref().unwrap();
        assert_eq!(status.phase, ContainerRecreateRequestPhase::Completed);
        assert_eq!(
            status.container_recreate_states[1].phase,
            ContainerRecreateRequestPhase::Failed
        );
        let original: serde_json::Value = serde_yaml::from_str(&text).unwrap();
        assert_eq!(serde_json::to_value(&crr).unwrap(), original);
    }

    #[test]
    fn system_populated_fields_round_trip() {
        let text = "
apiVersion: apps.kruise.io/v1alpha1
kind: ContainerRecreateRequest
metadata: {name: r, namespace: default}
spec:
  podName: web-0
  containers:
  - name: app
    preStop:
      httpGet: {path: /quit, port: http, httpHeaders: [{name: X, value: y}]}
    ports: [{name: http, containerPort: 8080, protocol: TCP}]
    statusContext: {containerID: \"containerd://abc\", restartCount: 2}
";
        let crr = parse(text).unwrap();
        let container = &crr.spec.containers[0];
        assert_eq!(container.ports[0].container_port, 8080);
        assert_eq!(
            container.status_context.as_ref().unwrap().container_id,
            "containerd://abc"
        );
        let original: serde_json::Value = serde_yaml::from_str(text).unwrap();
        assert_eq!(serde_json::to_value(&crr).unwrap(), original);
    }

    #[test]
    fn defaults_fill_strategy_and_active_label() {
        let mut crr = parse(MINIMAL).unwrap();
        crr.set_defaults();
        let strategy = crr.spec.strategy.as_ref().unwrap();
        assert_eq!(
            strategy.failure_policy,
            Some(ContainerRecreateRequestFailurePolicy::Fail)
        );
        // Nothing else in the strategy is defaulted without the pod.
        assert_eq!(
            *strategy,
            ContainerRecreateRequestStrategy {
                failure_policy: Some(ContainerRecreateRequestFailurePolicy::Fail),
                ..Default::default()
            }
        );
        assert_eq!(crr.spec.active_deadline_seconds, None);
        assert_eq!(crr.spec.ttl_seconds_after_finished, None);
        let labels = crr.metadata.labels.as_ref().unwrap();
        assert_eq!(labels.get(ACTIVE_LABEL).map(String::as_str), Some("true"));
        assert_eq!(labels.len(), 1);
    }

    #[test]
    fn defaults_keep_user_values() {
        let mut crr = parse(EXAMPLE).unwrap();
        let mut strategy = crr.spec.strategy.clone().unwrap();
        strategy.failure_policy = Some(ContainerRecreateRequestFailurePolicy::Ignore);
        crr.spec.strategy = Some(strategy.clone());
        crr.metadata.labels = Some([("team".to_owned(), "a".to_owned())].into());
        let spec_before = crr.spec.clone();
        crr.set_defaults();
        assert_eq!(crr.spec, spec_before);
        assert_eq!(crr.spec.strategy, Some(strategy));
        let labels = crr.metadata.labels.as_ref().unwrap();
        assert_eq!(labels.get("team").map(String::as_str), Some("a"));
        assert_eq!(labels.get(ACTIVE_LABEL).map(String::as_str), Some("true"));
    }

    #[test]
    fn wrong_enum_names_the_field() {
        let text = EXAMPLE.replace("failurePolicy: Fail", "failurePolicy: Retry");
        assert_eq!(field_error_path(&text), "spec.strategy.failurePolicy");
        let text = format!("{MINIMAL}status: {{phase: Done}}\n");
        assert_eq!(field_error_path(&text), "status.phase");
    }

    #[test]
    fn string_for_int_names_the_field() {
        let text = EXAMPLE.replace(
            "activeDeadlineSeconds: 300",
            "activeDeadlineSeconds: \"300\"",
        );
        assert_eq!(field_error_path(&text), "spec.activeDeadlineSeconds");
        let text = EXAMPLE.replace("minStartedSeconds: 10", "minStartedSeconds: ten");
        assert_eq!(field_error_path(&text), "spec.strategy.minStartedSeconds");
    }

    #[test]
    fn required_fields_are_required() {
        let text = EXAMPLE.replace("podName: pod-name", "");
        assert!(matches!(parse(&text), Err(ParseError::Field { .. })));
    }
}
