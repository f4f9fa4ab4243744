//! CloneSet validation after OpenKruise's `validation_test.go`
//! (TestValidate): the shared cases of
//! policies/fixtures/cloneset/validation.yaml, and the update rules.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod validation_common;

use k8s_openapi::api::core::v1::Pod;
use kruise_api::{CloneSet, Strictness, object_from_value};
use kruise_core::cloneset::validation::{
    Validator, Violation, added_pods_to_delete, check_pod_to_delete, validate,
};
use serde_json::{Value, json};

const CASES: &str = include_str!("../../fixtures/cloneset/validation.yaml");

fn base() -> Value {
    validation_common::cases(CASES).0
}

fn parse(value: Value) -> CloneSet {
    object_from_value(value, Strictness::Lenient).unwrap()
}

fn fields(violations: &[Violation]) -> Vec<&str> {
    violations.iter().map(|v| v.field.as_str()).collect()
}

#[test]
fn the_base_and_the_users_example_are_valid() {
    assert_eq!(validate(&parse(base()), None, Validator::V1alpha1), []);
    let example: Value = serde_yaml::from_str(include_str!(
        "../../fixtures/examples/cloneset-surge-partition.yaml"
    ))
    .unwrap();
    assert_eq!(validate(&parse(example), None, Validator::V1alpha1), []);
}

/// A value our types refuse (an unknown enum value) is refused by the
/// parse, naming the field; everything else by [`validate`].
#[test]
fn validate_cloneset() {
    let (_, cases) = validation_common::cases(CASES);
    assert!(cases.len() >= 20);
    for case in cases {
        match object_from_value::<CloneSet>(case.object, Strictness::Lenient) {
            Err(error) => {
                let message = error.to_string();
                assert!(
                    message.starts_with(&format!("{}:", case.refused)),
                    "{}: {message}",
                    case.name
                );
            }
            Ok(parsed) => {
                let violations = validate(&parsed, None, Validator::V1alpha1);
                assert_eq!(
                    fields(&violations),
                    [case.refused.as_str()],
                    "{}: {violations:?}",
                    case.name
                );
            }
        }
    }
}

#[test]
fn zero_replicas_need_no_budget_and_percentages_round_up() {
    let mut value = base();
    value["spec"]["replicas"] = json!(0);
    value["spec"]["updateStrategy"]["maxSurge"] = json!(0);
    assert_eq!(validate(&parse(value), None, Validator::V1alpha1), []);
    // 1% of 5 rounds up to one pod: a budget.
    let mut value = base();
    value["spec"]["updateStrategy"]["maxSurge"] = json!(0);
    value["spec"]["updateStrategy"]["maxUnavailable"] = json!("1%");
    assert_eq!(validate(&parse(value), None, Validator::V1alpha1), []);
}

#[test]
fn updates_change_only_the_mutable_fields() {
    let old = parse(base());
    let mut scaled = base();
    scaled["spec"]["replicas"] = json!(10);
    scaled["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.9.1");
    assert_eq!(
        validate(&parse(scaled), Some(&old), Validator::V1alpha1),
        []
    );

    let mut reselected = base();
    reselected["spec"]["selector"]["matchLabels"]["tier"] = json!("web");
    reselected["spec"]["template"]["metadata"]["labels"]["tier"] = json!("web");
    assert_eq!(
        fields(&validate(
            &parse(reselected),
            Some(&old),
            Validator::V1alpha1
        )),
        ["spec"]
    );
}

#[test]
fn in_place_only_updates_change_only_images() {
    let mut in_place_only = base();
    in_place_only["spec"]["updateStrategy"] = json!({"type": "InPlaceOnly", "maxUnavailable": 1});
    let old = parse(in_place_only.clone());
    let mut image = in_place_only.clone();
    image["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.9.1");
    assert_eq!(validate(&parse(image), Some(&old), Validator::V1alpha1), []);
    let mut env = in_place_only;
    env["spec"]["template"]["spec"]["containers"][0]["env"] = json!([{"name": "A", "value": "1"}]);
    assert_eq!(
        fields(&validate(&parse(env), Some(&old), Validator::V1alpha1)),
        ["spec.template"]
    );
}

fn with_pods_to_delete(names: &[&str]) -> CloneSet {
    let mut value = base();
    value["metadata"]["uid"] = json!("cs-uid");
    value["spec"]["scaleStrategy"] = json!({ "podsToDelete": names });
    parse(value)
}

/// After TestValidate's podsToDelete cases: only names an update adds are
/// looked up, and none when the list repeats a name.
#[test]
fn only_added_pods_to_delete_are_looked_up() {
    // (case, new list, old list if an update, names looked up)
    type Case<'a> = (&'a str, &'a [&'a str], Option<&'a [&'a str]>, &'a [&'a str]);
    let cases: [Case; 5] = [
        ("create", &["p1", "p0"], None, &["p0", "p1"]),
        ("one added", &["p0", "p1"], Some(&["p0"]), &["p1"]),
        ("unchanged", &["p0"], Some(&["p0"]), &[]),
        ("removed", &[], Some(&["p0"]), &[]),
        ("duplicates", &["p1", "p1"], None, &[]),
    ];
    for (name, new, old, looked_up) in cases {
        let old = old.map(with_pods_to_delete);
        assert_eq!(
            added_pods_to_delete(&with_pods_to_delete(new), old.as_ref()),
            looked_up,
            "{name}"
        );
    }
}

fn pod(owner_uid: Option<&str>, controller: bool, terminating: bool) -> Pod {
    let mut pod = json!({"metadata": {"name": "p0", "namespace": "default"}});
    if let Some(uid) = owner_uid {
        pod["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
            "name": "sample", "uid": uid, "controller": controller,
        }]);
    }
    if terminating {
        pod["metadata"]["deletionTimestamp"] = json!("2026-12-01T00:00:00Z");
    }
    serde_json::from_value(pod).unwrap()
}

#[test]
fn a_pod_to_delete_is_a_live_pod_this_cloneset_controls() {
    let set = with_pods_to_delete(&["p0"]);
    let not_ours = "Invalid value: \"p0\": find pod p0 owner is not this CloneSet";
    let cases = [
        ("ours", Some(pod(Some("cs-uid"), true, false)), None),
        (
            "missing",
            None,
            Some("Invalid value: \"p0\": find pod p0 failed: pods \"p0\" not found"),
        ),
        (
            "terminating",
            Some(pod(Some("cs-uid"), true, true)),
            Some("Invalid value: \"p0\": find pod p0 already terminating"),
        ),
        (
            "other owner",
            Some(pod(Some("other"), true, false)),
            Some(not_ours),
        ),
        (
            "not the controller",
            Some(pod(Some("cs-uid"), false, false)),
            Some(not_ours),
        ),
        ("no owner", Some(pod(None, false, false)), Some(not_ours)),
    ];
    for (name, found, refused) in cases {
        let violation = check_pod_to_delete(&set, "p0", found.as_ref());
        assert_eq!(
            violation.as_ref().map(|v| v.field.as_str()),
            refused.map(|_| "spec.scaleStrategy.podsToDelete"),
            "{name}"
        );
        assert_eq!(
            violation.map(|v| v.message),
            refused.map(str::to_owned),
            "{name}"
        );
    }
    // A CloneSet without a uid (not yet stored) owns no pod.
    let mut unstored = set.clone();
    unstored.metadata.uid = None;
    let owned_by_empty = pod(Some(""), true, false);
    assert!(check_pod_to_delete(&unstored, "p0", Some(&owned_by_empty)).is_some());
}

/// The messages of the pod-template checks are the API server's own.
#[test]
fn pod_template_messages_are_the_api_servers() {
    let container = |field: &str, value: Value| {
        let mut object = base();
        object["spec"]["template"]["spec"]["containers"][0][field] = value;
        validate(&parse(object), None, Validator::V1alpha1)
            .into_iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
    };
    let at = "spec.template.spec.containers[0]";
    assert_eq!(
        container("ports", json!([{"containerPort": 70000, "name": "-Web--"}])),
        [
            format!(
                "{at}.ports[0].name: Invalid value: \"-Web--\": must contain only alpha-numeric \
                 characters (a-z, 0-9), and hyphens (-),must not contain consecutive hyphens,\
                 must not begin or end with a hyphen"
            ),
            format!(
                "{at}.ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive"
            ),
        ]
    );
    assert_eq!(
        container(
            "resources",
            json!({"limits": {"cpu": "500m"}, "requests": {"cpu": 1}})
        ),
        [format!(
            "{at}.resources.requests[cpu]: Invalid value: \"1\": must be less than or equal to cpu limit of 500m"
        )]
    );
    assert_eq!(
        container("startupProbe", json!({})),
        [format!(
            "{at}.startupProbe: Required value: must specify a handler type"
        )]
    );
    // Named probe ports, defaults left unset, and requests up to the
    // limit are all fine.
    let fine = container(
        "readinessProbe",
        json!({"httpGet": {"port": "http", "scheme": "HTTPS"}, "successThreshold": 3}),
    );
    assert_eq!(fine, Vec::<String>::new());
    let at_limit = container(
        "resources",
        json!({"limits": {"memory": "1Gi"}, "requests": {"memory": "1024Mi"}}),
    );
    assert_eq!(at_limit, Vec::<String>::new());
}

/// The two validators, on what only one of them refuses.
#[test]
fn each_version_is_judged_by_its_own_validator() {
    let judged = |value: Value, old: Option<&CloneSet>, validator| {
        let violations = validate(&parse(value), old, validator);
        fields(&violations)
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let mut on_delete = base();
    on_delete["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
    assert_eq!(
        judged(on_delete.clone(), None, Validator::V1alpha1),
        ["spec.updateStrategy.type"]
    );
    assert!(judged(on_delete, None, Validator::V1beta1).is_empty());

    let mut deadline = base();
    deadline["spec"]["minReadySeconds"] = json!(30);
    deadline["spec"]["progressDeadlineSeconds"] = json!(10);
    assert_eq!(
        judged(deadline.clone(), None, Validator::V1alpha1),
        ["spec.progressDeadlineSeconds"]
    );
    assert!(judged(deadline, None, Validator::V1beta1).is_empty());

    let mut in_place_only = base();
    in_place_only["spec"]["updateStrategy"] = json!({"type": "InPlaceOnly", "maxUnavailable": 1});
    let old = parse(in_place_only.clone());
    let mut env = in_place_only;
    env["spec"]["template"]["spec"]["containers"][0]["env"] = json!([{"name": "A", "value": "1"}]);
    assert_eq!(
        judged(env.clone(), Some(&old), Validator::V1alpha1),
        ["spec.template"]
    );
    assert!(judged(env, Some(&old), Validator::V1beta1).is_empty());

    // Refused by both, each naming the field where its version has it.
    let mut no_budget = base();
    no_budget["spec"]["updateStrategy"] =
        json!({"partition": -1, "maxUnavailable": 0, "maxSurge": 0});
    assert_eq!(
        judged(no_budget.clone(), None, Validator::V1alpha1),
        [
            "spec.updateStrategy.partition",
            "spec.updateStrategy.maxUnavailable"
        ]
    );
    assert_eq!(
        judged(no_budget, None, Validator::V1beta1),
        [
            "spec.updateStrategy.rollingUpdate.partition",
            "spec.updateStrategy.rollingUpdate.maxUnavailable"
        ]
    );
}

#[test]
fn the_validator_is_the_request_versions() {
    assert_eq!(Validator::for_version("v1beta1"), Validator::V1beta1);
    assert_eq!(Validator::for_version("v1alpha1"), Validator::V1alpha1);
    assert_eq!(Validator::for_version(""), Validator::V1alpha1);
}

/// v1beta1's image pre-download fields reach the policy as v1alpha1's
/// annotations; v1beta1's validator checks them, v1alpha1's does not.
#[test]
fn v1beta1_checks_its_image_pre_download_fields() {
    let with = |annotations: Value| {
        let mut value = base();
        value["metadata"]["annotations"] = annotations;
        parse(value)
    };
    let field = "spec.updateStrategy.rollingUpdate.inPlaceUpdateStrategy";
    for (annotations, refused) in [
        (
            json!({"apps.kruise.io/image-predownload-parallelism": "5"}),
            None,
        ),
        (
            json!({"apps.kruise.io/image-predownload-parallelism": "50%"}),
            Some("imagePreDownloadParallelism does not support percentage value"),
        ),
        (
            json!({"apps.kruise.io/image-predownload-parallelism": "five"}),
            Some("must be a valid integer: strconv.ParseInt: parsing \"five\": invalid syntax"),
        ),
        (
            json!({"apps.kruise.io/image-predownload-parallelism": "-1"}),
            Some("imagePreDownloadParallelism must be non-negative"),
        ),
        (
            json!({"apps.kruise.io/image-predownload-timeout-seconds": "-1"}),
            Some("must be greater than or equal to 0"),
        ),
        (
            json!({"apps.kruise.io/image-predownload-min-updated-ready-pods": "-2"}),
            Some("must be greater than or equal to 0"),
        ),
    ] {
        let set = with(annotations.clone());
        assert_eq!(
            validate(&set, None, Validator::V1alpha1),
            [],
            "{annotations}"
        );
        // OnDelete has no rollingUpdate, where v1beta1 has these fields.
        let mut on_delete = set.clone();
        on_delete.spec.update_strategy = serde_json::from_value(json!({"type": "OnDelete"})).ok();
        assert_eq!(validate(&on_delete, None, Validator::V1beta1), []);
        let violations = validate(&set, None, Validator::V1beta1);
        match refused {
            None => assert_eq!(violations, [], "{annotations}"),
            Some(message) => {
                assert_eq!(violations.len(), 1, "{annotations}: {violations:?}");
                assert!(violations[0].field.starts_with(field), "{violations:?}");
                assert!(violations[0].message.contains(message), "{violations:?}");
            }
        }
    }
}
