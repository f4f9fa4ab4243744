//! NodeImage: the images kruise-daemon should pull on one node (the object
//! is named after the node), and how far it got.

use std::collections::BTreeMap;

use k8s_openapi::ClusterResourceScope;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::common::is_zero;
use crate::object::{KruiseObject, kruise_kind};

/// Per-attempt timeout the webhook gives a tag that has none.
pub const DEFAULT_PULL_TIMEOUT_SECONDS: i32 = 600;
/// Retries the webhook gives a tag that has none.
pub const DEFAULT_PULL_BACKOFF_LIMIT: i32 = 3;

kruise_kind! {
    /// A NodeImage (`kubectl get nodeimage`), one per node.
    NodeImage {
        spec: NodeImageSpec,
        status: NodeImageStatus,
        plural: "nodeimages",
        scope: ClusterResourceScope,
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeImageSpec {
    /// Images to pull, keyed by repository name (e.g. `nginx`, `reg.io/a/b`);
    /// at most 256.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub images: BTreeMap<String, ImageSpec>,
}

/// The tags to pull of one image repository.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageSpec {
    /// Secrets the daemon uses to authenticate the pulls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pull_secrets: Vec<ReferenceObject>,
    /// The tags to pull, sorted by tag.
    pub tags: Vec<ImageTagSpec>,
    /// Labels and annotations passed to the runtime's pod sandbox config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_config: Option<SandboxConfig>,
}

/// A namespaced object name, written `<namespace>/<name>`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceObject {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Extra labels and annotations for the CRI pull request's sandbox config.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxConfig {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// One tag (or `sha256:` digest) to pull.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageTagSpec {
    /// The tag, or a digest such as `sha256:...`.
    pub tag: String,
    /// When the tag was added; set by the webhook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::date_time")]
    pub created_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_policy: Option<ImageTagPullPolicy>,
    /// The objects (usually ImagePullJobs) that want this tag.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "object_references")]
    pub owner_references: Vec<ObjectReference>,
    /// Bumped to start a new pull round; never negative.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub version: i64,
    /// IfNotPresent succeeds at once when the image is already there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub image_pull_policy: Option<ImagePullPolicy>,
}

/// Limits of one tag's pull task.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageTagPullPolicy {
    /// Timeout of each attempt; defaults to 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i32>,
    /// Retries after the first attempt; defaults to 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,
    /// Seconds after the task finished before the tag is removed (required
    /// by validation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
    /// Deadline of the whole task from its start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
}

/// Whether to pull an image that is already on the node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ImagePullPolicy {
    /// Pull every time.
    Always,
    /// Succeed without pulling when the image exists.
    #[default]
    IfNotPresent,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeImageStatus {
    /// Number of tags in the spec, over all images.
    pub desired: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pulling: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub succeeded: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub waiting: i32,
    /// Pull progress per image, keyed like `spec.images`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub image_statuses: BTreeMap<String, ImageStatus>,
    /// Reserved: declared by OpenKruise but written by nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_sync_status: Option<SyncStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageStatus {
    /// Per-tag state, sorted by tag.
    pub tags: Vec<ImageTagStatus>,
}

/// How the pull of one tag went.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageTagStatus {
    pub tag: String,
    /// Waiting, Pulling, Succeeded or Failed.
    #[schemars(with = "String")]
    pub phase: ImagePullPhase,
    /// Percent done, 0–100; may go back on a retry.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub progress: i32,
    /// The spec version this status is for.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub version: i64,
    /// When the daemon took the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::date_time")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::date_time")]
    pub completion_time: Option<Time>,
    /// The pulled image as `<name>@<id>`.
    #[serde(rename = "imageID", default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Phase of one tag's pull task.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ImagePullPhase {
    /// Queued for a free worker.
    #[default]
    Waiting,
    Pulling,
    Succeeded,
    Failed,
}

/// When (and how) a new node first finished all its pulls.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::date_time")]
    pub sync_at: Option<Time>,
    /// Succeeded or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub status: Option<SyncStatusPhase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SyncStatusPhase {
    Succeeded,
    Failed,
}

impl ImageTagPullPolicy {
    /// Fill the timeout and retry count OpenKruise defaults.
    pub fn set_defaults(&mut self) {
        self.timeout_seconds
            .get_or_insert(DEFAULT_PULL_TIMEOUT_SECONDS);
        self.backoff_limit.get_or_insert(DEFAULT_PULL_BACKOFF_LIMIT);
    }
}

impl NodeImage {
    /// The webhook's one clock-dependent default: stamp `createdAt = now` on
    /// every tag that has none. Kept apart from `set_defaults` because the
    /// wasm targets have no clock; callers pass the time.
    pub fn set_created_at(&mut self, now: &Time) {
        for image in self.spec.images.values_mut() {
            for tag in &mut image.tags {
                tag.created_at.get_or_insert_with(|| now.clone());
            }
        }
    }
}

impl KruiseObject for NodeImage {
    /// OpenKruise's NodeImage defaulting (create and update): every tag gets
    /// a pull policy with timeoutSeconds 600 and backoffLimit 3, and spec and
    /// status tags are sorted by tag. `createdAt` needs a clock, see
    /// [`NodeImage::set_created_at`].
    fn set_defaults(&mut self) {
        for image in self.spec.images.values_mut() {
            for tag in &mut image.tags {
                tag.pull_policy
                    .get_or_insert_with(Default::default)
                    .set_defaults();
            }
            image.tags.sort_by(|a, b| a.tag.cmp(&b.tag));
        }
        if let Some(status) = &mut self.status {
            for image in status.image_statuses.values_mut() {
                image.tags.sort_by(|a, b| a.tag.cmp(&b.tag));
            }
        }
    }
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero_i64(value: &i64) -> bool {
    *value == 0
}

/// `[]corev1.ObjectReference`, each reference atomic.
fn object_references(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "apiVersion": { "type": "string" },
                "fieldPath": { "type": "string" },
                "kind": { "type": "string" },
                "name": { "type": "string" },
                "namespace": { "type": "string" },
                "resourceVersion": { "type": "string" },
                "uid": { "type": "string" }
            },
            "x-kubernetes-map-type": "atomic"
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::object::ParseError;
    use crate::object::test_support;

    fn parse(text: &str) -> Result<NodeImage, ParseError> {
        test_support::parse(text)
    }

    fn field_error_path(text: &str) -> String {
        test_support::field_error_path::<NodeImage>(text)
    }

    const EXAMPLE: &str = include_str!("../../fixtures/examples/nodeimage-node1.yaml");

    fn time(text: &str) -> Time {
        Time(text.parse().unwrap())
    }

    const UNSORTED: &str = "
apiVersion: apps.kruise.io/v1alpha1
kind: NodeImage
metadata: {name: node-a}
spec:
  images:
    nginx:
      tags:
      - tag: b
      - tag: a
        createdAt: \"2024-01-01T00:00:00Z\"
        pullPolicy: {timeoutSeconds: 60, ttlSecondsAfterFinished: 10}
        imagePullPolicy: Always
        version: 2
        ownerReferences:
        - {apiVersion: apps.kruise.io/v1alpha1, kind: ImagePullJob, namespace: default, name: j, uid: u-1}
      pullSecrets: [{namespace: kruise-daemon-config, name: s-abc123}]
      sandboxConfig: {labels: {a: b}, annotations: {c: d}}
status:
  desired: 2
  pulling: 1
  succeeded: 1
  imageStatuses:
    nginx:
      tags:
      - {tag: b, phase: Pulling, progress: 40, startTime: \"2024-01-01T00:01:00Z\"}
      - {tag: a, phase: Succeeded, progress: 100, version: 2, imageID: \"nginx@sha256:00\", completionTime: \"2024-01-01T00:02:00Z\"}
  firstSyncStatus: {status: Succeeded, syncAt: \"2024-01-01T00:03:00Z\", message: ok}
";

    #[test]
    fn example_round_trips() {
        let node_image = parse(EXAMPLE).expect("example parses");
        let tag = &node_image.spec.images["ubuntu"].tags[0];
        assert_eq!(tag.tag, "latest");
        let policy = tag.pull_policy.as_ref().unwrap();
        assert_eq!(policy.ttl_seconds_after_finished, Some(300));
        assert_eq!(policy.active_deadline_seconds, Some(1200));
        let original: serde_json::Value = serde_yaml::from_str(EXAMPLE).unwrap();
        assert_eq!(serde_json::to_value(&node_image).unwrap(), original);
    }

    #[test]
    fn full_object_round_trips() {
        let node_image = parse(UNSORTED).unwrap();
        let status = node_image.status.as_ref().unwrap();
        assert_eq!(
            status.image_statuses["nginx"].tags[1].phase,
            ImagePullPhase::Succeeded
        );
        assert_eq!(
            status.first_sync_status.as_ref().unwrap().status,
            Some(SyncStatusPhase::Succeeded)
        );
        let original: serde_json::Value = serde_yaml::from_str(UNSORTED).unwrap();
        assert_eq!(serde_json::to_value(&node_image).unwrap(), original);
    }

    #[test]
    fn defaults_fill_pull_policy_and_sort_tags() {
        let mut node_image = parse(UNSORTED).unwrap();
        node_image.set_defaults();
        let tags = &node_image.spec.images["nginx"].tags;
        assert_eq!(
            tags.iter().map(|t| t.tag.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        // A tag with no pull policy gets the full default one.
        assert_eq!(
            tags[1].pull_policy,
            Some(ImageTagPullPolicy {
                timeout_seconds: Some(600),
                backoff_limit: Some(3),
                ttl_seconds_after_finished: None,
                active_deadline_seconds: None,
            })
        );
        // A partial one keeps what the user set and gains only the rest.
        assert_eq!(
            tags[0].pull_policy,
            Some(ImageTagPullPolicy {
                timeout_seconds: Some(60),
                backoff_limit: Some(3),
                ttl_seconds_after_finished: Some(10),
                active_deadline_seconds: None,
            })
        );
        // Nothing else is touched; createdAt needs the clock.
        assert_eq!(tags[1].created_at, None);
        assert_eq!(tags[0].created_at, Some(time("2024-01-01T00:00:00Z")));
        assert_eq!(tags[0].image_pull_policy, Some(ImagePullPolicy::Always));
        assert_eq!(tags[1].image_pull_policy, None);
        assert_eq!(tags[0].version, 2);
        let status_tags = &node_image.status.as_ref().unwrap().image_statuses["nginx"].tags;
        assert_eq!(
            status_tags
                .iter()
                .map(|t| t.tag.as_str())
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
    }

    #[test]
    fn defaults_keep_user_values() {
        let mut node_image = parse(EXAMPLE).unwrap();
        let before = node_image.clone();
        node_image.set_defaults();
        assert_eq!(node_image, before);
    }

    #[test]
    fn created_at_is_stamped_only_where_missing() {
        let mut node_image = parse(UNSORTED).unwrap();
        let now = time("2025-06-01T12:00:00Z");
        node_image.set_created_at(&now);
        let tags = &node_image.spec.images["nginx"].tags;
        assert_eq!(tags[0].created_at, Some(now));
        assert_eq!(tags[1].created_at, Some(time("2024-01-01T00:00:00Z")));
    }

    #[test]
    fn wrong_enum_names_the_field() {
        let text = UNSORTED.replace("imagePullPolicy: Always", "imagePullPolicy: Never");
        assert_eq!(
            field_error_path(&text),
            "spec.images.nginx.tags[1].imagePullPolicy"
        );
        let text = UNSORTED.replace("phase: Pulling", "phase: Downloading");
        assert_eq!(
            field_error_path(&text),
            "status.imageStatuses.nginx.tags[0].phase"
        );
    }

    #[test]
    fn string_for_int_names_the_field() {
        let text = EXAMPLE.replace("timeoutSeconds: 600", "timeoutSeconds: \"600\"");
        assert_eq!(
            field_error_path(&text),
            "spec.images.ubuntu.tags[0].pullPolicy.timeoutSeconds"
        );
        let text = UNSORTED.replace("desired: 2", "desired: two");
        assert_eq!(field_error_path(&text), "status.desired");
    }
}
