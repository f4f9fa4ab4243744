//! OpenKruise v1.9.0's own SidecarSet hashes and stored defaults
//! (policies/fixtures/openkruise-v1.9.0/webhook-cases, recorded from its
//! code): every hash annotation it stamped is ours byte for byte, and our
//! defaulting of each SidecarSet stores what it stores.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod openkruise_recorded;

use kruise_api::{KruiseObject, SidecarSet, Strictness, object_from_value};
use kruise_core::go_json::{self, GoType, types::SIDECAR_CONTAINER};
use kruise_core::sidecarset::{sidecarset_hashes, stamp_hashes};
use openkruise_recorded::webhook_cases;
use serde_json::Value;

const HASH: &str = "kruise.io/sidecarset-hash";
const HASH_WITHOUT_IMAGE: &str = "kruise.io/sidecarset-hash-without-image";

/// Each SidecarSet OpenKruise stored, with the case it comes from.
fn stored() -> Vec<(String, Value)> {
    let mut all = Vec::new();
    for (case, file) in webhook_cases() {
        for set in file["openkruise"]["storedSidecarSets"].as_array().unwrap() {
            all.push((format!("{case} {}", set["metadata"]["name"]), set.clone()));
        }
    }
    all
}

/// Sidecar containers (taken out of their spec) as Go's `json.Marshal`
/// writes them.
fn as_go_writes_them(containers: Option<&mut Value>) -> Option<String> {
    let containers = containers.map(Value::take)?;
    Some(go_json::typed(&containers, &GoType::Slice(&SIDECAR_CONTAINER)).unwrap())
}

#[test]
fn every_recorded_hash_is_ours_byte_for_byte() {
    let stored = stored();
    assert!(stored.len() >= 150, "{} SidecarSets", stored.len());
    for (name, object) in stored {
        let set: SidecarSet = object_from_value(object.clone(), Strictness::Lenient).unwrap();
        let (hash, without_image) = sidecarset_hashes(&set.spec);
        let annotations = &object["metadata"]["annotations"];
        assert_eq!(hash, annotations[HASH], "{name}");
        assert_eq!(without_image, annotations[HASH_WITHOUT_IMAGE], "{name}");
    }
}

/// What our defaulting (the mutate-defaults module's) makes of each input
/// SidecarSet is what OpenKruise stored: both hash annotations, the
/// containers as Go writes them (Go drops an empty list such as `env: []`
/// the input has; we keep it), and the rest of the spec field for field.
#[test]
fn our_defaults_store_what_openkruise_stores() {
    let mut compared = 0;
    for (case, file) in webhook_cases() {
        let inputs = file["input"]["sidecarSets"].as_array().unwrap();
        let outputs = file["openkruise"]["storedSidecarSets"].as_array().unwrap();
        assert_eq!(inputs.len(), outputs.len(), "{case}");
        for (input, expected) in inputs.iter().zip(outputs) {
            let name = format!("{case} {}", input["metadata"]["name"]);
            let mut set: SidecarSet = object_from_value(input.clone(), Strictness::Strict).unwrap();
            set.set_defaults();
            stamp_hashes(&mut set);
            let mut ours = serde_json::to_value(&set).unwrap();
            let mut expected = expected.clone();
            for list in ["containers", "initContainers"] {
                assert_eq!(
                    as_go_writes_them(ours["spec"].get_mut(list)),
                    as_go_writes_them(expected["spec"].get_mut(list)),
                    "{name} {list}"
                );
            }
            assert_eq!(ours["spec"], expected["spec"], "{name}");
            assert_eq!(
                ours["metadata"]["annotations"], expected["metadata"]["annotations"],
                "{name}"
            );
            compared += 1;
        }
    }
    assert!(compared >= 150, "{compared} SidecarSets");
}
