//! SidecarSet: sidecar containers injected into matching pods at creation
//! and upgraded in place afterwards. Cluster-scoped.

use std::collections::BTreeMap;

use k8s_openapi::ClusterResourceScope;
use k8s_openapi::api::core::v1::{Container, LocalObjectReference, ObjectFieldSelector, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{UpdatePriorityStrategy, UpdateScatterTerm, is_false, is_zero};
use crate::object::{KruiseObject, kruise_kind};
use crate::pod_defaults;

kruise_kind! {
    /// A SidecarSet (`kubectl get sidecarset`).
    SidecarSet {
        spec: SidecarSetSpec,
        status: SidecarSetStatus,
        plural: "sidecarsets",
        scope: ClusterResourceScope,
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetSpec {
    /// Pods whose labels match get the sidecars; must not be empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::label_selector")]
    pub selector: Option<LabelSelector>,
    /// Only inject into pods of this namespace (exclusive with namespaceSelector).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Only inject into pods of namespaces whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::label_selector")]
    pub namespace_selector: Option<LabelSelector>,
    /// Injected at pod creation only; never upgraded in place.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_containers: Vec<SidecarContainer>,
    /// Injected at pod creation; their images are upgraded in place.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<SidecarContainer>,
    /// Candidate volumes; only those a sidecar mounts are added to the pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::preserve_unknown")]
    pub volumes: Vec<Volume>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<SidecarSetUpdateStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub injection_strategy: Option<SidecarSetInjectionStrategy>,
    /// Merged into the pod's imagePullSecrets at creation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::local_object_references")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// ControllerRevisions kept; defaults to 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history_limit: Option<i32>,
    /// Annotations written onto injected pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patch_pod_metadata: Vec<SidecarSetPatchPodMetadata>,
}

// Read through `SidecarContainerFields` (sidecar_container_fields.rs says why).
/// A `corev1.Container` plus where and how it is injected and upgraded.
#[derive(Clone, Debug, Default, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct SidecarContainer {
    #[serde(flatten)]
    #[schemars(skip)]
    pub container: Container,
    /// BeforeAppContainer or AfterAppContainer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub pod_inject_policy: Option<PodInjectPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_strategy: Option<SidecarContainerUpgradeStrategy>,
    /// Mount the app containers' volumes into this sidecar too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_volume_policy: Option<ShareVolumePolicy>,
    /// Share the app containers' volume devices too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_volume_device_policy: Option<ShareVolumePolicy>,
    /// Environment variables copied from an app container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transfer_env: Vec<TransferEnvVar>,
    /// Sidecar resources computed from the app containers' (v1.9+).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_policy: Option<ResourcesPolicy>,
}

impl SidecarContainer {
    pub fn name(&self) -> &str {
        &self.container.name
    }

    pub fn is_hot_upgrade(&self) -> bool {
        self.upgrade_strategy
            .as_ref()
            .and_then(|s| s.upgrade_type)
            .is_some_and(|t| t == UpgradeType::HotUpgrade)
    }

    /// An init container with `restartPolicy: Always` (a Kubernetes native sidecar).
    pub fn is_native_sidecar(&self) -> bool {
        self.container.restart_policy.as_deref() == Some("Always")
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum PodInjectPolicy {
    /// Ahead of the pod's own containers.
    BeforeAppContainer,
    /// After the pod's own containers.
    AfterAppContainer,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarContainerUpgradeStrategy {
    /// ColdUpgrade (default) or HotUpgrade.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub upgrade_type: Option<UpgradeType>,
    /// Image of the idle twin of a hot-upgraded sidecar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hot_upgrade_empty_image: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum UpgradeType {
    /// Restart the sidecar with the new image.
    #[default]
    ColdUpgrade,
    /// Run two twins and hand over to the upgraded one.
    HotUpgrade,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ShareVolumePolicy {
    /// enabled or disabled.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub type_: Option<ShareVolumePolicyType>,
}

impl ShareVolumePolicy {
    pub fn is_enabled(policy: Option<&Self>) -> bool {
        policy.and_then(|p| p.type_) == Some(ShareVolumePolicyType::Enabled)
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ShareVolumePolicyType {
    Enabled,
    #[default]
    Disabled,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TransferEnvVar {
    /// The app container to copy from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_container_name: Option<String>,
    /// The app container's name, read from a pod label or annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_container_name_from: Option<SourceContainerNameSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_names: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceContainerNameSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::object_field_selector")]
    pub field_ref: Option<ObjectFieldSelector>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourcesPolicy {
    pub target_containers_mode: TargetContainersMode,
    /// Which app containers count; defaults to `.*`.
    #[serde(default = "match_all", skip_serializing_if = "Option::is_none")]
    pub target_containers_name_regex: Option<String>,
    pub resources_expr: ResourcesExpr,
}

#[allow(clippy::unnecessary_wraps)] // serde's `default` wants the field's type
fn match_all() -> Option<String> {
    Some(".*".to_owned())
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TargetContainersMode {
    /// Sum the app containers' resources.
    #[default]
    Sum,
    /// Take the largest app container's resources.
    Max,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResourcesExpr {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceExprs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<ResourceExprs>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceExprs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetUpdateStrategy {
    /// RollingUpdate (default) or NotUpdate.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub type_: Option<SidecarSetUpdateStrategyType>,
    /// Stop upgrading existing pods.
    #[serde(default, skip_serializing_if = "is_false")]
    pub paused: bool,
    /// Only pods matching this are upgraded (canary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::label_selector")]
    pub selector: Option<LabelSelector>,
    /// Matched pods (or percent) kept on old versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::int_or_string")]
    pub partition: Option<IntOrString>,
    /// Defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::int_or_string")]
    pub max_unavailable: Option<IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_strategy: Option<UpdatePriorityStrategy>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scatter_strategy: Vec<UpdateScatterTerm>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SidecarSetUpdateStrategyType {
    #[default]
    RollingUpdate,
    /// Inject only; never touch existing pods.
    NotUpdate,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetInjectionStrategy {
    /// Inject nothing into new pods.
    #[serde(default, skip_serializing_if = "is_false")]
    pub paused: bool,
    /// Inject a historical revision instead of the current spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<SidecarSetInjectRevision>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetInjectRevision {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_name: Option<String>,
    /// Always (default) or Partial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(default = "always")]
    pub policy: Option<RevisionPolicy>,
}

#[allow(clippy::unnecessary_wraps)]
fn always() -> Option<RevisionPolicy> {
    Some(RevisionPolicy::Always)
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RevisionPolicy {
    /// Every new pod gets the historical revision.
    #[default]
    Always,
    /// New pods get it by the partition and canary selector.
    Partial,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetPatchPodMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Retain (default), Overwrite or MergePatchJson.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub patch_policy: Option<PatchPolicy>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum PatchPolicy {
    /// Set only keys the pod does not have.
    #[default]
    Retain,
    /// Always set.
    Overwrite,
    /// JSON-merge-patch into the existing value.
    MergePatchJson,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Pods that match and carry this SidecarSet's sidecars.
    pub matched_pods: i32,
    /// Matched pods on the latest sidecar version.
    pub updated_pods: i32,
    /// Matched pods that are ready.
    pub ready_pods: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub updated_ready_pods: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,
}

impl KruiseObject for SidecarSet {
    /// OpenKruise's SidecarSet defaulting: strategies, inject policies,
    /// patch policies, and Kubernetes' own container and volume defaults
    /// (they are part of the hashed container spec).
    fn set_defaults(&mut self) {
        let spec = &mut self.spec;
        let strategy = spec.update_strategy.get_or_insert_with(Default::default);
        strategy
            .type_
            .get_or_insert(SidecarSetUpdateStrategyType::RollingUpdate);
        strategy.max_unavailable.get_or_insert(IntOrString::Int(1));
        strategy.partition.get_or_insert(IntOrString::Int(0));
        spec.revision_history_limit.get_or_insert(10);
        // Go writes an unset struct as `{}`: OpenKruise stores
        // `injectionStrategy: {}`.
        let injection = spec.injection_strategy.get_or_insert_with(Default::default);
        if let Some(revision) = injection.revision.as_mut() {
            revision.policy.get_or_insert(RevisionPolicy::Always);
        }
        for sidecar in &mut spec.containers {
            default_sidecar(sidecar, PodInjectPolicy::BeforeAppContainer);
        }
        for sidecar in &mut spec.init_containers {
            default_sidecar(sidecar, PodInjectPolicy::AfterAppContainer);
        }
        for volume in &mut spec.volumes {
            pod_defaults::default_volume(volume);
        }
        for patch in &mut spec.patch_pod_metadata {
            patch.patch_policy.get_or_insert(PatchPolicy::Retain);
        }
    }
}

fn default_sidecar(sidecar: &mut SidecarContainer, inject_policy: PodInjectPolicy) {
    sidecar.pod_inject_policy.get_or_insert(inject_policy);
    sidecar
        .upgrade_strategy
        .get_or_insert_with(Default::default)
        .upgrade_type
        .get_or_insert(UpgradeType::ColdUpgrade);
    sidecar
        .share_volume_policy
        .get_or_insert_with(Default::default)
        .type_
        .get_or_insert(ShareVolumePolicyType::Disabled);
    for transfer in &mut sidecar.transfer_env {
        if let Some(field_ref) = transfer
            .source_container_name_from
            .as_mut()
            .and_then(|from| from.field_ref.as_mut())
        {
            field_ref.api_version.get_or_insert_with(|| "v1".to_owned());
        }
    }
    pod_defaults::default_container(&mut sidecar.container);
}
