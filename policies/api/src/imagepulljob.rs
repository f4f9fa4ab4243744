//! ImagePullJob: pre-pull one image on a set of nodes, a few nodes at a time,
//! by writing tags into their NodeImages.

use std::collections::BTreeMap;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, Time,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::is_zero;
use crate::nodeimage::{
    DEFAULT_PULL_BACKOFF_LIMIT, DEFAULT_PULL_TIMEOUT_SECONDS, ImagePullPolicy, SandboxConfig,
};
use crate::object::{KruiseObject, kruise_kind};

/// Finalizer that keeps a job until it has released the secrets it mirrored.
pub const DELETION_PROTECTION_FINALIZER: &str = "apps.kruise.io/deletion-protection";

kruise_kind! {
    /// An ImagePullJob (`kubectl get imagepulljob`).
    ImagePullJob {
        spec: ImagePullJobSpec,
        status: ImagePullJobStatus,
        plural: "imagepulljobs",
        scope: NamespaceResourceScope,
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePullJobSpec {
    /// The image to pull, e.g. `nginx:1.25`.
    pub image: String,
    /// Secrets in the job's namespace to pull with; immutable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pull_secrets: Vec<String>,
    /// The nodes (by NodeImage name or node labels) to pull on; unset means
    /// all nodes. Not together with podSelector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<ImagePullJobNodeSelector>,
    /// Pull on the nodes running the matching pods of this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::label_selector")]
    pub pod_selector: Option<LabelSelector>,
    /// Nodes pulling at once (an integer, no percentages); 1 when unset,
    /// 0 pauses the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::int_or_string")]
    pub parallelism: Option<IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_policy: Option<PullPolicy>,
    /// When the job is done.
    pub completion_policy: CompletionPolicy,
    /// Labels and annotations passed to the runtime's pod sandbox config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_config: Option<SandboxConfig>,
    /// Always, or IfNotPresent (default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub image_pull_policy: Option<ImagePullPolicy>,
}

/// Which NodeImages a job targets: by name, or by a label selector over the
/// node labels (not both).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct ImagePullJobNodeSelector {
    /// Node names. Set (even empty) means only these nodes, so `None` and
    /// an empty list differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::match_expressions")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

impl ImagePullJobNodeSelector {
    /// The label-selector half, as a `metav1.LabelSelector`.
    pub fn label_selector(&self) -> LabelSelector {
        LabelSelector {
            match_labels: (!self.match_labels.is_empty()).then(|| self.match_labels.clone()),
            match_expressions: (!self.match_expressions.is_empty())
                .then(|| self.match_expressions.clone()),
        }
    }
}

/// Limits of each node's pull task.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PullPolicy {
    /// Timeout of each attempt; defaults to 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i32>,
    /// Retries after the first attempt; defaults to 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompletionPolicy {
    /// Always (default): finish once every node is done; Never: keep pulling
    /// on nodes that match later.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub type_: Option<CompletionPolicyType>,
    /// Deadline from the job's start (Always only); at least the pull timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    /// Seconds after completion before the job is deleted (Always only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
}

/// Whether a job ever completes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum CompletionPolicyType {
    /// Complete when all targets succeeded or failed, or at the deadline.
    #[default]
    Always,
    /// Never complete; new matching nodes keep being added.
    Never,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePullJobStatus {
    /// First reconcile of the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::date_time")]
    pub start_time: Option<Time>,
    /// When the job finished (Always only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::date_time")]
    pub completion_time: Option<Time>,
    /// Number of target NodeImages.
    pub desired: i32,
    /// Targets still pulling or waiting.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub active: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub succeeded: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed: i32,
    /// Progress or outcome in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Sorted names of the nodes whose pull failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_nodes: Vec<String>,
}

impl KruiseObject for ImagePullJob {
    /// OpenKruise's v1alpha1 ImagePullJob defaulting: completion type Always,
    /// a pull policy with timeoutSeconds 600 and backoffLimit 3,
    /// imagePullPolicy IfNotPresent, and (on create) the deletion-protection
    /// finalizer. Parallelism's 1 is the controller's fallback, not written.
    fn set_defaults(&mut self) {
        let spec = &mut self.spec;
        spec.completion_policy
            .type_
            .get_or_insert(CompletionPolicyType::Always);
        let pull_policy = spec.pull_policy.get_or_insert_with(Default::default);
        pull_policy
            .timeout_seconds
            .get_or_insert(DEFAULT_PULL_TIMEOUT_SECONDS);
        pull_policy
            .backoff_limit
            .get_or_insert(DEFAULT_PULL_BACKOFF_LIMIT);
        spec.image_pull_policy
            .get_or_insert(ImagePullPolicy::IfNotPresent);
        let finalizers = self.metadata.finalizers.get_or_insert_with(Vec::new);
        if !finalizers
            .iter()
            .any(|f| f == DELETION_PROTECTION_FINALIZER)
        {
            finalizers.push(DELETION_PROTECTION_FINALIZER.to_owned());
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::object::ParseError;
    use crate::object::test_support;

    fn parse(text: &str) -> Result<ImagePullJob, ParseError> {
        test_support::parse(text)
    }

    fn field_error_path(text: &str) -> String {
        test_support::field_error_path::<ImagePullJob>(text)
    }

    const EXAMPLE: &str = include_str!("../../fixtures/examples/imagepulljob.yaml");

    const MINIMAL: &str = "
apiVersion: apps.kruise.io/v1alpha1
kind: ImagePullJob
metadata: {name: pull-nginx, namespace: default}
spec:
  image: nginx:1.25
  completionPolicy: {}
";

    #[test]
    fn example_round_trips() {
        let job = parse(EXAMPLE).expect("example parses");
        assert_eq!(job.spec.image, "nginx:1.9.1");
        assert_eq!(job.spec.parallelism, Some(IntOrString::Int(10)));
        assert_eq!(
            job.spec.selector.as_ref().unwrap().names,
            Some(vec!["node1".to_owned(), "node2".to_owned()])
        );
        assert_eq!(
            job.spec.completion_policy.type_,
            Some(CompletionPolicyType::Always)
        );
        assert_eq!(job.spec.pull_secrets, ["secret-name1", "secret-name2"]);
        let original: serde_json::Value = serde_yaml::from_str(EXAMPLE).unwrap();
        assert_eq!(serde_json::to_value(&job).unwrap(), original);
    }

    #[test]
    fn selectors_and_status_round_trip() {
        let text = "
apiVersion: apps.kruise.io/v1alpha1
kind: ImagePullJob
metadata: {name: j, namespace: default}
spec:
  image: nginx:1.25
  parallelism: \"2\"
  selector:
    names: []
    matchLabels: {pool: web}
    matchExpressions: [{key: zone, operator: In, values: [a, b]}]
  podSelector: {matchLabels: {app: web}}
  sandboxConfig: {labels: {a: b}}
  imagePullPolicy: Always
  completionPolicy: {type: Never}
status:
  startTime: \"2024-01-01T00:00:00Z\"
  desired: 5
  active: 2
  succeeded: 1
  failedNodes: [node-c]
  message: job is running, progress 20.0%
";
        let job = parse(text).unwrap();
        let selector = job.spec.selector.as_ref().unwrap();
        assert_eq!(selector.names, Some(Vec::new()));
        assert_eq!(
            selector.label_selector().match_labels,
            Some([("pool".to_owned(), "web".to_owned())].into())
        );
        assert_eq!(job.status.as_ref().unwrap().desired, 5);
        let original: serde_json::Value = serde_yaml::from_str(text).unwrap();
        assert_eq!(serde_json::to_value(&job).unwrap(), original);
    }

    #[test]
    fn defaults_fill_what_openkruise_fills() {
        let mut job = parse(MINIMAL).unwrap();
        job.set_defaults();
        assert_eq!(
            job.spec.completion_policy,
            CompletionPolicy {
                type_: Some(CompletionPolicyType::Always),
                ..Default::default()
            }
        );
        assert_eq!(
            job.spec.pull_policy,
            Some(PullPolicy {
                timeout_seconds: Some(600),
                backoff_limit: Some(3)
            })
        );
        assert_eq!(
            job.spec.image_pull_policy,
            Some(ImagePullPolicy::IfNotPresent)
        );
        assert_eq!(
            job.metadata.finalizers,
            Some(vec![DELETION_PROTECTION_FINALIZER.to_owned()])
        );
        // Parallelism is the controller's business.
        assert_eq!(job.spec.parallelism, None);
        assert_eq!(job.spec.selector, None);
    }

    #[test]
    fn defaults_keep_user_values() {
        let mut job = parse(EXAMPLE).unwrap();
        job.spec.completion_policy.type_ = Some(CompletionPolicyType::Never);
        job.spec.pull_policy = Some(PullPolicy {
            timeout_seconds: Some(30),
            backoff_limit: None,
        });
        job.spec.image_pull_policy = Some(ImagePullPolicy::Always);
        job.metadata.finalizers = Some(vec![
            "other".to_owned(),
            DELETION_PROTECTION_FINALIZER.to_owned(),
        ]);
        job.set_defaults();
        assert_eq!(
            job.spec.completion_policy.type_,
            Some(CompletionPolicyType::Never)
        );
        assert_eq!(
            job.spec.completion_policy.active_deadline_seconds,
            Some(1200)
        );
        assert_eq!(
            job.spec.pull_policy,
            Some(PullPolicy {
                timeout_seconds: Some(30),
                backoff_limit: Some(3)
            })
        );
        assert_eq!(job.spec.image_pull_policy, Some(ImagePullPolicy::Always));
        assert_eq!(job.spec.parallelism, Some(IntOrString::Int(10)));
        assert_eq!(
            job.metadata.finalizers,
            Some(vec![
                "other".to_owned(),
                DELETION_PROTECTION_FINALIZER.to_owned()
            ])
        );
    }

    #[test]
    fn wrong_enum_names_the_field() {
        let text = EXAMPLE.replace("type: Always", "type: Sometimes");
        assert_eq!(field_error_path(&text), "spec.completionPolicy.type");
        let text = format!("{MINIMAL}  imagePullPolicy: Never\n");
        assert_eq!(field_error_path(&text), "spec.imagePullPolicy");
    }

    #[test]
    fn string_for_int_names_the_field() {
        let text = EXAMPLE.replace("backoffLimit: 3", "backoffLimit: three");
        assert_eq!(field_error_path(&text), "spec.pullPolicy.backoffLimit");
        let text = EXAMPLE.replace(
            "activeDeadlineSeconds: 1200",
            "activeDeadlineSeconds: \"1200\"",
        );
        assert_eq!(
            field_error_path(&text),
            "spec.completionPolicy.activeDeadlineSeconds"
        );
    }

    #[test]
    fn completion_policy_is_required() {
        let text = "
apiVersion: apps.kruise.io/v1alpha1
kind: ImagePullJob
metadata: {name: j, namespace: default}
spec: {image: nginx}
";
        assert!(matches!(parse(text), Err(ParseError::Field { .. })));
    }
}
