//! Which namespaces a ResourceDistribution targets (spec 07 §1.1).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use kruise_api::resourcedistribution::ResourceDistributionTargets;
use kruise_core::resourcedistribution::{
    NamespaceInfo, SYSTEM_NAMESPACES, selects_namespace, target_namespaces,
};
use serde_json::{Value, json};

fn targets(value: Value) -> ResourceDistributionTargets {
    serde_json::from_value(value).unwrap()
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// ns-1..ns-5 labelled as in the seed scenario, plus the system namespaces
/// and `default`.
fn seed_cluster() -> Vec<NamespaceInfo> {
    vec![
        NamespaceInfo::new("default"),
        NamespaceInfo::new("kube-system").with_label("group", "test"),
        NamespaceInfo::new("kube-public").with_label("group", "test"),
        NamespaceInfo::new("ns-1"),
        NamespaceInfo::new("ns-2").with_label("group", "test"),
        NamespaceInfo::new("ns-3").with_label("group", "test"),
        NamespaceInfo::new("ns-4").with_label("group", "other"),
        NamespaceInfo::new("ns-5").with_label("group", "test"),
    ]
}

fn seed_targets() -> ResourceDistributionTargets {
    let example: Value = serde_yaml::from_str(include_str!(
        "../../fixtures/examples/resourcedistribution.yaml"
    ))
    .unwrap();
    targets(example["spec"]["targets"].clone())
}

#[test]
fn the_seed_example_targets_listed_and_labelled_namespaces_minus_excluded() {
    let set = target_namespaces(&seed_targets(), &seed_cluster()).unwrap();
    assert_eq!(set.matched, names(&["ns-1", "ns-2", "ns-4", "ns-5"]));
    assert_eq!(
        set.unmatched,
        names(&["default", "kube-public", "kube-system", "ns-3"])
    );
}

#[test]
fn the_spec_example_matches_upstream_do_reconcile() {
    // Spec 07 §4 / upstream TestDoReconcile.
    let cluster = vec![
        NamespaceInfo::new("ns-1").with_label("group", "one"),
        NamespaceInfo::new("ns-2").with_label("group", "one"),
        NamespaceInfo::new("ns-3").with_label("group", "two"),
        NamespaceInfo::new("ns-4").with_label("group", "one"),
        NamespaceInfo::new("ns-5").with_label("group", "two"),
    ];
    let targets = targets(json!({
        "includedNamespaces": {"list": [{"name": "ns-1"}, {"name": "ns-3"}, {"name": "ns-5"}]},
        "namespaceLabelSelector": {"matchLabels": {"group": "one"}},
        "excludedNamespaces": {"list": [{"name": "ns-4"}]}
    }));
    let set = target_namespaces(&targets, &cluster).unwrap();
    assert_eq!(set.matched, names(&["ns-1", "ns-2", "ns-3", "ns-5"]));
    assert_eq!(set.unmatched, names(&["ns-4"]));
}

#[test]
fn all_namespaces_takes_every_existing_namespace_but_the_system_ones() {
    let set = target_namespaces(&targets(json!({"allNamespaces": true})), &seed_cluster()).unwrap();
    assert_eq!(
        set.matched,
        names(&["default", "ns-1", "ns-2", "ns-3", "ns-4", "ns-5"])
    );
    assert_eq!(set.unmatched, names(&SYSTEM_NAMESPACES));
}

#[test]
fn all_namespaces_ignores_listed_namespaces_that_do_not_exist() {
    let set = target_namespaces(
        &targets(
            json!({"allNamespaces": true, "includedNamespaces": {"list": [{"name": "ghost"}]}}),
        ),
        &seed_cluster(),
    )
    .unwrap();
    assert!(!set.matched.contains("ghost"));
}

#[test]
fn exclusion_wins_over_all_namespaces_selector_and_list() {
    let t = targets(json!({
        "allNamespaces": true,
        "includedNamespaces": {"list": [{"name": "ns-2"}]},
        "namespaceLabelSelector": {"matchLabels": {"group": "test"}},
        "excludedNamespaces": {"list": [{"name": "ns-2"}, {"name": "default"}]}
    }));
    let set = target_namespaces(&t, &seed_cluster()).unwrap();
    assert_eq!(set.matched, names(&["ns-1", "ns-3", "ns-4", "ns-5"]));
}

#[test]
fn system_namespaces_are_never_targets_even_when_listed() {
    let t = targets(
        json!({"includedNamespaces": {"list": [{"name": "kube-system"}, {"name": "kube-public"}, {"name": "ns-1"}]}}),
    );
    let set = target_namespaces(&t, &seed_cluster()).unwrap();
    assert_eq!(set.matched, names(&["ns-1"]));
    assert!(set.unmatched.contains("kube-system"));
}

#[test]
fn listed_namespaces_count_even_when_missing() {
    let t =
        targets(json!({"includedNamespaces": {"list": [{"name": "ns-1"}, {"name": "not-yet"}]}}));
    let set = target_namespaces(&t, &seed_cluster()).unwrap();
    assert_eq!(set.matched, names(&["not-yet", "ns-1"]));
    assert!(!set.unmatched.contains("not-yet"));
}

#[test]
fn an_empty_or_missing_selector_selects_nothing() {
    for t in [
        json!({"namespaceLabelSelector": {}}),
        json!({"namespaceLabelSelector": {"matchLabels": {}, "matchExpressions": []}}),
        json!({}),
    ] {
        let set = target_namespaces(&targets(t.clone()), &seed_cluster()).unwrap();
        assert!(set.matched.is_empty(), "{t}");
        assert_eq!(set.unmatched.len(), seed_cluster().len(), "{t}");
    }
}

#[test]
fn match_expressions_select_too() {
    let t = targets(json!({"namespaceLabelSelector": {"matchExpressions": [
        {"key": "group", "operator": "In", "values": ["other", "test"]},
        {"key": "group", "operator": "NotIn", "values": ["test"]}
    ]}}));
    let set = target_namespaces(&t, &seed_cluster()).unwrap();
    assert_eq!(set.matched, names(&["ns-4"]));
}

#[test]
fn terminating_namespaces_stay_targets() {
    let mut cluster = seed_cluster();
    cluster[3] = NamespaceInfo::new("ns-1").terminating();
    let set = target_namespaces(&seed_targets(), &cluster).unwrap();
    assert!(set.matched.contains("ns-1"));
}

#[test]
fn an_invalid_selector_is_an_error() {
    let t = targets(
        json!({"namespaceLabelSelector": {"matchExpressions": [{"key": "a", "operator": "Maybe"}]}}),
    );
    assert!(target_namespaces(&t, &seed_cluster()).is_err());
}

#[test]
fn one_namespace_at_a_time_for_namespace_events() {
    let t = seed_targets();
    let selected = |ns: NamespaceInfo| selects_namespace(&t, &ns).unwrap();
    assert!(selected(
        NamespaceInfo::new("new-one").with_label("group", "test")
    ));
    assert!(!selected(NamespaceInfo::new("new-one")));
    assert!(selected(NamespaceInfo::new("ns-4")), "listed");
    assert!(
        !selected(NamespaceInfo::new("ns-3").with_label("group", "test")),
        "excluded"
    );
    assert!(!selected(
        NamespaceInfo::new("kube-public").with_label("group", "test")
    ));
}
