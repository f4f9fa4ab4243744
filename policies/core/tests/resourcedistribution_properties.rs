//! Properties of the ResourceDistribution core over random clusters and
//! targets: the target rules always hold, a reconcile converges in one
//! round, a converged cluster plans nothing, and objects the distribution
//! does not control are never written or deleted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;
use kruise_api::resourcedistribution::ResourceDistributionTargets;
use kruise_api::{ResourceDistribution, Strictness, object_from_value};
use kruise_core::go_json;
use kruise_core::resourcedistribution::{
    Action, Existing, NamespaceInfo, ReconcileInput, SYSTEM_NAMESPACES, plan, target_namespaces,
};
use proptest::prelude::*;
use serde_json::{Value, json};

const POOL: [&str; 8] = [
    "ns-1",
    "ns-2",
    "ns-3",
    "ns-4",
    "ns-5",
    "default",
    "kube-system",
    "kube-public",
];

fn subset() -> impl Strategy<Value = Vec<String>> {
    proptest::sample::subsequence(POOL.to_vec(), 0..=POOL.len())
        .prop_map(|names| names.into_iter().map(str::to_owned).collect())
}

fn cluster() -> impl Strategy<Value = Vec<NamespaceInfo>> {
    proptest::collection::vec(
        (
            any::<bool>(),
            prop_oneof![Just("a"), Just("b"), Just("")],
            any::<bool>(),
        ),
        POOL.len(),
    )
    .prop_map(|flags| {
        POOL.iter()
            .zip(flags)
            .filter(|(_, (exists, _, _))| *exists)
            .map(|(name, (_, group, terminating))| {
                let mut ns = NamespaceInfo::new(*name);
                if !group.is_empty() {
                    ns = ns.with_label("group", group);
                }
                ns.terminating = terminating && *name != "default";
                ns
            })
            .collect()
    })
}

fn targets() -> impl Strategy<Value = Value> {
    (any::<bool>(), subset(), subset(), prop_oneof![Just(None), Just(Some("a")), Just(Some("b"))]).prop_map(
        |(all, included, excluded, group)| {
            let list = |names: Vec<String>| json!({"list": names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>()});
            let mut targets = json!({"allNamespaces": all, "includedNamespaces": list(included), "excludedNamespaces": list(excluded)});
            if let Some(group) = group {
                targets["namespaceLabelSelector"] = json!({"matchLabels": {"group": group}});
            }
            targets
        },
    )
}

fn distribution(targets: &Value, data: &str) -> ResourceDistribution {
    object_from_value(
        json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ResourceDistribution",
            "metadata": {"name": "rd", "uid": "uid-1", "generation": 1},
            "spec": {"resource": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "shared"}, "data": {"k": data}}, "targets": targets}
        }),
        Strictness::Strict,
    )
    .unwrap()
}

fn names(value: &Value, list: &str) -> BTreeSet<String> {
    value[list]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap().to_owned())
        .collect()
}

fn foreign(namespace: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared", "namespace": namespace}, "data": {"k": "foreign"}})
}

fn now() -> Timestamp {
    "2026-01-01T00:00:00Z".parse().unwrap()
}

proptest! {
    #[test]
    fn the_target_rules_hold(cluster in cluster(), targets_value in targets()) {
        let targets: ResourceDistributionTargets = serde_json::from_value(targets_value.clone()).unwrap();
        let set = target_namespaces(&targets, &cluster).unwrap();
        let existing: BTreeSet<String> = cluster.iter().map(|ns| ns.name.clone()).collect();
        let excluded = names(&targets_value, "excludedNamespaces");
        let included = names(&targets_value, "includedNamespaces");
        for name in &set.matched {
            prop_assert!(!excluded.contains(name), "{name} is excluded");
            prop_assert!(!SYSTEM_NAMESPACES.contains(&name.as_str()));
            let labelled = cluster.iter().any(|ns| &ns.name == name && targets_value["namespaceLabelSelector"]["matchLabels"]["group"].as_str().is_some_and(|g| ns.labels.get("group").is_some_and(|l| l == g)));
            let listed = included.contains(name) && !targets.all_namespaces;
            let all = targets.all_namespaces && existing.contains(name);
            prop_assert!(labelled || listed || all, "{name} has no reason to be a target");
        }
        prop_assert!(set.matched.is_disjoint(&set.unmatched));
        let union: BTreeSet<String> = set.matched.union(&set.unmatched).cloned().collect();
        prop_assert!(union.is_superset(&existing));
        prop_assert!(set.unmatched.is_subset(&existing));
    }

    #[test]
    fn one_round_converges_and_foreign_objects_are_never_touched(
        cluster in cluster(),
        before in targets(),
        after in targets(),
        foreign_in in subset(),
        data in "[a-z<>&]{0,8}",
    ) {
        let first = distribution(&before, "v1");
        let mut objects: BTreeMap<String, Existing> = foreign_in
            .iter()
            .map(|ns| (ns.clone(), Existing::Found(foreign(ns))))
            .collect();
        for rd in [first, distribution(&after, &data)] {
            let round = plan(&ReconcileInput {
                distribution: &rd,
                namespaces: &cluster,
                existing: &objects,
                now: now(),
            })
            .unwrap();
            for action in &round.actions {
                let namespace = action.namespace();
                prop_assert!(!foreign_in.contains(&namespace.to_owned()), "touched the foreign object in {namespace}");
                match action {
                    Action::Create { object, .. } | Action::Update { object, .. } => {
                        prop_assert_eq!(object["metadata"]["namespace"].as_str(), Some(namespace));
                        objects.insert(namespace.to_owned(), Existing::Found(object.clone()));
                    }
                    Action::Delete { .. } => {
                        prop_assert!(round.targets.unmatched.contains(namespace));
                        objects.remove(namespace);
                    }
                }
            }
            let status = &round.status;
            prop_assert_eq!(status.desired, status.succeeded + status.failed);
            prop_assert_eq!(status.conditions.len(), 6);
            let again = plan(&ReconcileInput {
                distribution: &rd,
                namespaces: &cluster,
                existing: &objects,
                now: now(),
            })
            .unwrap();
            prop_assert!(again.actions.is_empty(), "not converged: {:?}", again.actions);
            prop_assert_eq!(&again.status, &round.status);
        }
    }

    #[test]
    fn go_json_is_json_of_the_same_value(map in proptest::collection::btree_map("[ -~\u{80}-\u{2030}]{0,6}", "[\u{0}-\u{7f}\u{2028}\u{2029}é]{0,10}", 0..6)) {
        let value = json!({"data": map, "n": [1, -2, 1.5]});
        let bytes = go_json::unstructured(&value).into_bytes();
        let parsed: Value = serde_json::from_slice(&bytes).unwrap();
        prop_assert_eq!(parsed, value);
        let text = String::from_utf8(bytes).unwrap();
        prop_assert!(!text.contains('<') && !text.contains('>') && !text.contains('&'));
    }
}
