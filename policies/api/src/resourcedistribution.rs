//! ResourceDistribution: copy one Secret or ConfigMap into a set of
//! namespaces and keep the copies in sync.

use k8s_openapi::ClusterResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::common::{is_false, is_zero};
use crate::object::{KruiseObject, kruise_kind};

/// Annotation on every copy: the name of the ResourceDistribution.
pub const RESOURCE_FROM_ANNOTATION: &str = "kruise.io/resourcedistribution.resource.from";
/// Annotation on every copy: hex SHA-256 of the raw `spec.resource`.
pub const RESOURCE_HASH_ANNOTATION: &str = "kruise.io/resourcedistribution.resource.hashcode";

kruise_kind! {
    /// A ResourceDistribution (`kubectl get distributor`).
    ResourceDistribution {
        spec: ResourceDistributionSpec,
        status: ResourceDistributionStatus,
        plural: "resourcedistributions",
        scope: ClusterResourceScope,
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceDistributionSpec {
    /// The full Secret or ConfigMap manifest to distribute; its namespace is
    /// ignored.
    #[schemars(schema_with = "embedded_resource")]
    pub resource: serde_json::Value,
    /// The namespaces to distribute to.
    pub targets: ResourceDistributionTargets,
}

/// Target namespaces: all (or the listed ones plus those matching the
/// selector), minus the excluded ones.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceDistributionTargets {
    /// Every namespace.
    #[serde(default, skip_serializing_if = "is_false")]
    pub all_namespaces: bool,
    /// Namespaces never targeted, whatever else matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded_namespaces: Option<ResourceDistributionTargetNamespaces>,
    /// Namespaces targeted by name; they need not exist yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub included_namespaces: Option<ResourceDistributionTargetNamespaces>,
    /// Namespaces targeted by label; an empty selector selects none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::label_selector")]
    pub namespace_label_selector: Option<LabelSelector>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceDistributionTargetNamespaces {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub list: Vec<ResourceDistributionNamespace>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceDistributionNamespace {
    /// Namespace name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceDistributionStatus {
    /// Size of the target set, missing namespaces included.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub desired: i32,
    /// Targets holding an up-to-date copy.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub succeeded: i32,
    /// `desired - succeeded`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed: i32,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Exactly six, one per condition type, in a fixed order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ResourceDistributionCondition>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceDistributionCondition {
    /// Which kind of failure this condition reports.
    #[serde(rename = "type")]
    #[schemars(with = "String")]
    pub type_: ResourceDistributionConditionType,
    /// "True" if some namespace hit this failure, else "False".
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::date_time")]
    pub last_transition_time: Option<Time>,
    /// The last error of this kind, or "Succeeded".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The namespaces that hit this failure (singular key in v1alpha1).
    #[serde(
        rename = "failedNamespace",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub failed_namespaces: Vec<String>,
}

/// The six condition types, in the order they appear in the status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ResourceDistributionConditionType {
    #[default]
    GetResourceFailed,
    CreateResourceFailed,
    UpdateResourceFailed,
    DeleteResourceFailed,
    ConflictOccurred,
    NamespaceNotExists,
}

impl ResourceDistributionConditionType {
    /// All types, in status order.
    pub const ALL: [Self; 6] = [
        Self::GetResourceFailed,
        Self::CreateResourceFailed,
        Self::UpdateResourceFailed,
        Self::DeleteResourceFailed,
        Self::ConflictOccurred,
        Self::NamespaceNotExists,
    ];
}

impl KruiseObject for ResourceDistribution {
    /// Nothing: OpenKruise has no mutating webhook and no defaulting for
    /// ResourceDistribution, only validation.
    fn set_defaults(&mut self) {}
}

/// A whole embedded object, kept as written.
fn embedded_resource(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-embedded-resource": true,
        "x-kubernetes-preserve-unknown-fields": true
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::object::ParseError;
    use crate::object::test_support;

    fn parse(text: &str) -> Result<ResourceDistribution, ParseError> {
        test_support::parse(text)
    }

    fn field_error_path(text: &str) -> String {
        test_support::field_error_path::<ResourceDistribution>(text)
    }

    const EXAMPLE: &str = include_str!("../../fixtures/examples/resourcedistribution.yaml");

    const WITH_STATUS: &str = "
apiVersion: apps.kruise.io/v1alpha1
kind: ResourceDistribution
metadata: {name: rd}
spec:
  resource: {apiVersion: v1, kind: Secret, metadata: {name: s}, data: {k: dg==}}
  targets: {allNamespaces: true}
status:
  desired: 3
  succeeded: 2
  failed: 1
  observedGeneration: 4
  conditions:
  - {type: GetResourceFailed, status: \"False\", reason: Succeeded, lastTransitionTime: \"2024-01-01T00:00:00Z\"}
  - {type: NamespaceNotExists, status: \"True\", reason: not found, failedNamespace: [ns-9]}
";

    #[test]
    fn example_round_trips() {
        let rd = parse(EXAMPLE).expect("example parses");
        assert_eq!(rd.spec.resource["kind"], "ConfigMap");
        let targets = &rd.spec.targets;
        assert!(!targets.all_namespaces);
        assert_eq!(
            targets.included_namespaces.as_ref().unwrap().list[1].name,
            "ns-4"
        );
        assert_eq!(
            targets.excluded_namespaces.as_ref().unwrap().list[0].name,
            "ns-3"
        );
        let original: serde_json::Value = serde_yaml::from_str(EXAMPLE).unwrap();
        assert_eq!(serde_json::to_value(&rd).unwrap(), original);
    }

    #[test]
    fn status_round_trips() {
        let rd = parse(WITH_STATUS).unwrap();
        let status = rd.status.as_ref().unwrap();
        assert_eq!(
            status.conditions[1].type_,
            ResourceDistributionConditionType::NamespaceNotExists
        );
        assert_eq!(status.conditions[1].failed_namespaces, ["ns-9"]);
        let original: serde_json::Value = serde_yaml::from_str(WITH_STATUS).unwrap();
        assert_eq!(serde_json::to_value(&rd).unwrap(), original);
    }

    #[test]
    fn unknown_fields_inside_the_resource_are_kept_not_rejected() {
        // The resource is free-form: strict parsing must not flag its keys.
        let rd = parse(WITH_STATUS).unwrap();
        assert_eq!(rd.spec.resource["data"]["k"], "dg==");
    }

    #[test]
    fn defaults_change_nothing() {
        for text in [EXAMPLE, WITH_STATUS] {
            let mut rd = parse(text).unwrap();
            let before = rd.clone();
            rd.set_defaults();
            assert_eq!(rd, before);
        }
    }

    #[test]
    fn wrong_enum_names_the_field() {
        let text = WITH_STATUS.replace("type: NamespaceNotExists", "type: Exploded");
        assert_eq!(field_error_path(&text), "status.conditions[1].type");
    }

    #[test]
    fn string_for_int_names_the_field() {
        let text = WITH_STATUS.replace("desired: 3", "desired: three");
        assert_eq!(field_error_path(&text), "status.desired");
        let text = WITH_STATUS.replace("observedGeneration: 4", "observedGeneration: \"4\"");
        assert_eq!(field_error_path(&text), "status.observedGeneration");
    }

    #[test]
    fn wrong_type_in_targets_names_the_field() {
        let text = EXAMPLE.replace("  targets:\n", "  targets:\n    allNamespaces: maybe\n");
        assert_eq!(field_error_path(&text), "spec.targets.allNamespaces");
    }
}
