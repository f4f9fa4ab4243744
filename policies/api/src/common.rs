//! Types several kinds share.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The order in which pods are updated: by weighted selectors or by the
/// value of a label (higher first).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdatePriorityStrategy {
    /// Pods matching heavier terms are updated first; weights add up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weight_priority: Vec<UpdatePriorityWeightTerm>,
    /// Pods are ordered by the integer in these label keys, first key first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub order_priority: Vec<UpdatePriorityOrderTerm>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdatePriorityWeightTerm {
    /// Weight in the range 1–100.
    pub weight: i32,
    #[schemars(schema_with = "crate::schema::label_selector")]
    pub match_selector: LabelSelector,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdatePriorityOrderTerm {
    /// A label key whose integer value (its trailing digits) orders pods.
    pub ordered_key: String,
}

/// Spread updated pods evenly over the pods carrying each label.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UpdateScatterTerm {
    pub key: String,
    pub value: String,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
pub(crate) fn is_false(value: &bool) -> bool {
    !*value
}

#[allow(clippy::trivially_copy_pass_by_ref)]
pub(crate) fn is_zero(value: &i32) -> bool {
    *value == 0
}
