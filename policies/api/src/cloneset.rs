//! CloneSet: a set of identical pods with partitioned, surge-aware and
//! in-place rollouts.

use std::collections::BTreeMap;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{UpdatePriorityStrategy, UpdateScatterTerm, is_false, is_zero};
use crate::object::{KruiseObject, kruise_kind};

kruise_kind! {
    /// A CloneSet (`kubectl get clone`).
    CloneSet {
        spec: CloneSetSpec,
        status: CloneSetStatus,
        plural: "clonesets",
        scope: NamespaceResourceScope,
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloneSetSpec {
    /// Desired number of pods; defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Selects the pods this CloneSet owns; must match the template's labels.
    #[schemars(schema_with = "crate::schema::label_selector")]
    pub selector: LabelSelector,
    /// Template describes the pods that will be created.
    #[schemars(schema_with = "crate::schema::preserve_unknown")]
    pub template: PodTemplateSpec,
    /// Claims created per pod instance and named after it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::preserve_unknown")]
    pub volume_claim_templates: Vec<PersistentVolumeClaim>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_strategy: Option<CloneSetScaleStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<CloneSetUpdateStrategy>,
    /// ControllerRevisions kept; defaults to 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history_limit: Option<i32>,
    /// Seconds a new pod must be ready before it counts as available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,
    /// Seconds without progress before the Progressing condition turns False.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline_seconds: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloneSetScaleStrategy {
    /// Pods to delete by name; scale-in removes these first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods_to_delete: Vec<String>,
    /// Caps unavailable pods while scaling up (percent rounds up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::int_or_string")]
    pub max_unavailable: Option<IntOrString>,
    /// Do not give a new pod the PVCs a deleted pod left behind.
    #[serde(rename = "disablePVCReuse", default, skip_serializing_if = "is_false")]
    pub disable_pvc_reuse: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloneSetUpdateStrategy {
    /// ReCreate (default), InPlaceIfPossible, InPlaceOnly or OnDelete.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub type_: Option<CloneSetUpdateStrategyType>,
    /// Pods (or percent of replicas) kept on old revisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::int_or_string")]
    pub partition: Option<IntOrString>,
    /// Defaults to 20%.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::int_or_string")]
    pub max_unavailable: Option<IntOrString>,
    /// Pods created above replicas during an update; defaults to 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::int_or_string")]
    pub max_surge: Option<IntOrString>,
    /// Stops updating pods (scaling goes on).
    #[serde(default, skip_serializing_if = "is_false")]
    pub paused: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_strategy: Option<UpdatePriorityStrategy>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scatter_strategy: Vec<UpdateScatterTerm>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_update_strategy: Option<InPlaceUpdateStrategy>,
}

/// How pods move to a new revision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum CloneSetUpdateStrategyType {
    /// Delete old pods and create new ones.
    #[default]
    ReCreate,
    /// Update in place when only images (or metadata) change, else recreate.
    InPlaceIfPossible,
    /// Update in place only; other changes are rejected.
    InPlaceOnly,
    /// Never update a pod: a pod takes the new revision when it is deleted
    /// and made again (OpenKruise v1.9's v1beta1 `type: OnDelete`).
    OnDelete,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceUpdateStrategy {
    /// Seconds between marking a pod not-ready and updating it in place.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub grace_period_seconds: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::int_or_string")]
    pub image_pre_download_parallelism: Option<IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pre_download_timeout_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pre_download_min_updated_ready_pods: Option<i32>,
}

/// Hooks that hold pods in a lifecycle state until labels or finalizers clear.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_delete: Option<LifecycleHook>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_update: Option<LifecycleHook>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_normal: Option<LifecycleHook>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleHook {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels_handler: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finalizers_handler: Vec<String>,
    /// Mark the pod not-ready while the hook holds it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub mark_pod_not_ready: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloneSetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    pub replicas: i32,
    pub ready_replicas: i32,
    pub available_replicas: i32,
    pub updated_replicas: i32,
    pub updated_ready_replicas: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_available_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_updated_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,
    /// `spec.selector` as a string, for the scale subresource (HPA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<CloneSetCondition>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloneSetCondition {
    /// FailedScale, FailedUpdate or Progressing.
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::date_time")]
    pub last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::date_time")]
    pub last_update_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl CloneSet {
    /// OpenKruise's template defaults: what the API server gives a pod
    /// spec, for the pod template, and `status.phase: Pending` for each
    /// volume claim template. OpenKruise applies them on create, and on
    /// update only when the template changed.
    ///
    /// One difference from the API server's: an app container (not an init
    /// container) without `imagePullPolicy` gets `Always`, whatever its
    /// image tag, as OpenKruise's template defaults do.
    pub fn set_template_defaults(&mut self) {
        if let Some(spec) = &mut self.spec.template.spec {
            for container in &mut spec.containers {
                container
                    .image_pull_policy
                    .get_or_insert_with(|| "Always".to_owned());
            }
            crate::pod_defaults::default_pod_spec(spec);
        }
        for claim in &mut self.spec.volume_claim_templates {
            let status = claim.status.get_or_insert_with(Default::default);
            status.phase.get_or_insert_with(|| "Pending".to_owned());
        }
    }
}

impl KruiseObject for CloneSet {
    /// OpenKruise's CloneSet defaulting (v1alpha1): replicas 1, 10 revisions
    /// kept, ReCreate, partition 0, maxUnavailable 20%, maxSurge 0, and an
    /// empty in-place strategy for the in-place types. An unset scale
    /// strategy is stored as `{}`, as Go writes the empty struct.
    fn set_defaults(&mut self) {
        let spec = &mut self.spec;
        spec.replicas.get_or_insert(1);
        spec.revision_history_limit.get_or_insert(10);
        spec.scale_strategy.get_or_insert_with(Default::default);
        let strategy = spec.update_strategy.get_or_insert_with(Default::default);
        let type_ = *strategy
            .type_
            .get_or_insert(CloneSetUpdateStrategyType::ReCreate);
        strategy.partition.get_or_insert(IntOrString::Int(0));
        strategy
            .max_unavailable
            .get_or_insert_with(|| IntOrString::String("20%".to_owned()));
        strategy.max_surge.get_or_insert(IntOrString::Int(0));
        if matches!(
            type_,
            CloneSetUpdateStrategyType::InPlaceIfPossible | CloneSetUpdateStrategyType::InPlaceOnly
        ) {
            strategy
                .in_place_update_strategy
                .get_or_insert_with(Default::default);
        }
    }
}
