//! The user's three CloneSets as OpenKruise v1.9.0 stores them and names
//! their revisions (policies/fixtures/openkruise-v1.9.0/cloneset-revisions,
//! recorded from its code): our defaulting stores the same CloneSet, our
//! revision holds the same bytes under the same name, and a revision
//! OpenKruise wrote is recognised as the template's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod openkruise_recorded;

use k8s_openapi::api::apps::v1::ControllerRevision;
use kruise_api::{CloneSet, KruiseObject, Strictness, object_from_value};
use kruise_core::cloneset::revision::{
    RevisionWrite, plan_revisions, revision_data, revision_hash,
};
use kruise_core::go_json::{self, types::POD_TEMPLATE_SPEC};
use openkruise_recorded::cloneset_revisions;
use serde_json::{Value, json};

/// The CloneSet as our defaulting module stores it on create.
fn defaulted(input: &Value) -> CloneSet {
    let mut set: CloneSet = object_from_value(input.clone(), Strictness::Strict).unwrap();
    set.set_defaults();
    set.set_template_defaults();
    set
}

#[test]
fn we_store_the_cloneset_openkruise_stores() {
    for (name, case) in cloneset_revisions() {
        let ours = serde_json::to_value(defaulted(&case["input"])).unwrap();
        let theirs = &case["openkruise"]["defaultedCloneSet"];
        let template =
            |spec: &Value| go_json::as_go_value(&spec["template"], &POD_TEMPLATE_SPEC).unwrap();
        assert_eq!(
            template(&ours["spec"]),
            template(&theirs["spec"]),
            "{name}: template"
        );
        let rest = |spec: &Value| {
            let mut spec = spec.clone();
            spec.as_object_mut().unwrap().remove("template");
            spec
        };
        assert_eq!(rest(&ours["spec"]), rest(&theirs["spec"]), "{name}: spec");
    }
}

#[test]
fn our_revision_is_openkruises_byte_for_byte() {
    for (name, case) in cloneset_revisions() {
        let set = defaulted(&case["input"]);
        let data = revision_data(&set.spec.template);
        let theirs = &case["openkruise"];
        assert_eq!(
            go_json::unstructured(&data),
            theirs["revisionData"],
            "{name}"
        );
        let hash = revision_hash(&data, 0);
        assert_eq!(hash, theirs["hashLabel"], "{name}");
        assert_eq!(
            format!("{}-{hash}", set.metadata.name.unwrap()),
            theirs["revisionName"],
            "{name}"
        );
    }
}

/// A revision OpenKruise wrote holds the template, whether it is read
/// back byte for byte or as our older data without Go's zero values: no
/// second revision, so no pod looks outdated.
#[test]
fn a_revision_openkruise_wrote_is_recognised() {
    for (name, case) in cloneset_revisions() {
        let set = defaulted(&case["input"]);
        let theirs = &case["openkruise"];
        let data: Value = serde_json::from_str(theirs["revisionData"].as_str().unwrap()).unwrap();
        let revision: ControllerRevision = serde_json::from_value(json!({
            "metadata": {"name": theirs["revisionName"], "namespace": "default"},
            "data": data, "revision": 1,
        }))
        .unwrap();
        let plan = plan_revisions(&set, &[revision], &[]);
        assert_eq!(plan.write, RevisionWrite::None, "{name}");
        assert_eq!(plan.revisions.update, theirs["revisionName"], "{name}");
    }
}
