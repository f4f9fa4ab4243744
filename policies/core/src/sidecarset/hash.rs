//! The SidecarSet hashes (spec 01 §2): what tells the controller a pod's
//! sidecars are outdated.

use std::collections::BTreeMap;

use kruise_api::SidecarSet;
use kruise_api::sidecarset::{SidecarContainer, SidecarSetSpec};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::annotations::{HASH_ANNOTATION, HASH_WITHOUT_IMAGE_ANNOTATION};
use crate::go_json::{self, types::SIDECARSET_HASH_INPUT};
use crate::history::safe_encode;

/// `(hash, hash without images)` of a (defaulted) SidecarSet spec.
///
/// The input is the JSON of `{"containers": …}`, plus `"initContainers"`
/// (all of them) when any init container is a native sidecar
/// (`restartPolicy: Always`); the second hash blanks every `image` first.
/// The 64 hex digits of the SHA-256 are mapped onto a 27-letter alphabet.
/// So volumes, pull secrets, selectors, strategies and patchPodMetadata do
/// not affect it, nor do init containers when none is a native sidecar.
///
/// The JSON is written as Go's `encoding/json` writes OpenKruise's types
/// ([`crate::go_json`]), so the hashes are OpenKruise's, byte for byte.
/// Containers Go could not even decode (a quantity that does not parse,
/// which validation refuses) are hashed over their unstructured JSON
/// instead: stable, though OpenKruise has no hash to compare it with.
pub fn sidecarset_hashes(spec: &SidecarSetSpec) -> (String, String) {
    let mut input = hash_input(&spec.containers, &spec.init_containers);
    let with_image = hash_of(&input);
    // A container without an image serializes without the key.
    let lists = input
        .as_object_mut()
        .into_iter()
        .flat_map(|m| m.values_mut());
    for list in lists.filter_map(Value::as_array_mut) {
        for container in list.iter_mut().filter_map(Value::as_object_mut) {
            container.remove("image");
        }
    }
    (with_image, hash_of(&input))
}

/// Write both hash annotations onto a SidecarSet, as OpenKruise's SidecarSet
/// mutating webhook does after defaulting (call `set_defaults` first).
pub fn stamp_hashes(sidecar_set: &mut SidecarSet) {
    let (hash, without_image) = sidecarset_hashes(&sidecar_set.spec);
    let annotations = sidecar_set
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    annotations.insert(HASH_ANNOTATION.to_owned(), hash);
    annotations.insert(HASH_WITHOUT_IMAGE_ANNOTATION.to_owned(), without_image);
}

/// A SidecarSet as OpenKruise's SidecarSet webhook leaves it in the cluster:
/// defaulted, and hashed unless a hash is already stamped (pods record the
/// stamped one). Preparing a stored SidecarSet again changes nothing.
pub fn prepare_stored(mut sidecar_set: SidecarSet) -> SidecarSet {
    kruise_api::KruiseObject::set_defaults(&mut sidecar_set);
    let stamped = sidecar_set
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(HASH_ANNOTATION));
    if !stamped {
        stamp_hashes(&mut sidecar_set);
    }
    sidecar_set
}

/// `{"containers": …}`, with `"initContainers"` when one is a native
/// sidecar.
fn hash_input(containers: &[SidecarContainer], init_containers: &[SidecarContainer]) -> Value {
    let mut input = serde_json::Map::new();
    input.insert("containers".to_owned(), to_json(containers));
    if init_containers
        .iter()
        .any(SidecarContainer::is_native_sidecar)
    {
        input.insert("initContainers".to_owned(), to_json(init_containers));
    }
    Value::Object(input)
}

fn hash_of(input: &Value) -> String {
    let json = go_json::typed(input, &SIDECARSET_HASH_INPUT)
        .unwrap_or_else(|_| go_json::unstructured(input));
    safe_encode(&hex(&Sha256::digest(json.as_bytes())))
}

/// Our containers as JSON; none (Go's nil slice, written `null`) when
/// empty, as a spec without them decodes in Go.
fn to_json(containers: &[SidecarContainer]) -> Value {
    if containers.is_empty() {
        return Value::Null;
    }
    // Plain structs with string-keyed maps always serialize.
    serde_json::to_value(containers).unwrap_or_default()
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    bytes
        .iter()
        .flat_map(|b| [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 0x0f)]])
        .map(char::from)
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use k8s_openapi::api::core::v1::{Container, LocalObjectReference, Volume};
    use kruise_api::sidecarset::SidecarContainer;

    use super::*;
    use crate::history::SAFE_ALPHABET;

    fn sidecar(name: &str, image: &str) -> SidecarContainer {
        SidecarContainer {
            container: Container {
                name: name.to_owned(),
                image: Some(image.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn native(mut sidecar: SidecarContainer) -> SidecarContainer {
        sidecar.container.restart_policy = Some("Always".to_owned());
        sidecar
    }

    fn spec(containers: Vec<SidecarContainer>) -> SidecarSetSpec {
        SidecarSetSpec {
            containers,
            ..Default::default()
        }
    }

    #[test]
    fn safe_encode_maps_hex_digits_onto_the_alphabet() {
        // '0' is byte 48, 48 % 27 = 21 → '4'; 'a' is 97, 97 % 27 = 16 → 'v'.
        assert_eq!(safe_encode("0123456789abcdef"), "456789bcdfvwxz24");
    }

    #[test]
    fn hash_of_known_json() {
        // Go writes the container in its struct order, with its empty
        // structs: echo -n '{"containers":[{"name":"a","image":"a:1",
        // "resources":{},"upgradeStrategy":{},"shareVolumePolicy":{}}]}'
        // (one line) | sha256sum, then each hex digit mapped through the
        // alphabet (computed outside this crate).
        let (hash, _) = sidecarset_hashes(&spec(vec![sidecar("a", "a:1")]));
        assert_eq!(hash, EXPECTED_A1);
        // Without the image, the same less `"image":"a:1",`.
        let (_, without_image) = sidecarset_hashes(&spec(vec![sidecar("a", "a:1")]));
        assert_eq!(without_image, EXPECTED_A_NO_IMAGE);
    }

    const EXPECTED_A1: &str = "c9fv2665w5w2bv86445v78f542x5cvvb5v2z75z98647z6wbw45zcbw99v256582";
    const EXPECTED_A_NO_IMAGE: &str =
        "49x48b4xwc2d7b4vxfcxwvdvcdbzx5cv54cw8z76b2572f6bw6z2xz54dzd5wzd4";

    #[test]
    fn hashes_are_64_safe_characters() {
        let (hash, without_image) = sidecarset_hashes(&spec(vec![sidecar("a", "a:1")]));
        for h in [&hash, &without_image] {
            assert_eq!(h.len(), 64);
            assert!(h.bytes().all(|b| SAFE_ALPHABET.contains(&b)), "{h}");
        }
        assert_ne!(hash, without_image);
    }

    #[test]
    fn image_change_alters_only_the_full_hash() {
        let old = sidecarset_hashes(&spec(vec![sidecar("a", "a:1")]));
        let new = sidecarset_hashes(&spec(vec![sidecar("a", "a:2")]));
        assert_ne!(old.0, new.0);
        assert_eq!(old.1, new.1);
    }

    #[test]
    fn other_container_fields_alter_both() {
        let old = sidecarset_hashes(&spec(vec![sidecar("a", "a:1")]));
        let mut changed = sidecar("a", "a:1");
        changed.container.command = Some(vec!["sleep".to_owned()]);
        let new = sidecarset_hashes(&spec(vec![changed]));
        assert_ne!(old.0, new.0);
        assert_ne!(old.1, new.1);
    }

    #[test]
    fn fields_outside_the_containers_do_not_alter_it() {
        let base = spec(vec![sidecar("a", "a:1")]);
        let mut other = base.clone();
        other.volumes = vec![Volume {
            name: "v".to_owned(),
            ..Default::default()
        }];
        other.image_pull_secrets = vec![LocalObjectReference {
            name: "s".to_owned(),
        }];
        other.init_containers = vec![sidecar("init", "busybox")];
        other.namespace = Some("ns".to_owned());
        assert_eq!(sidecarset_hashes(&base), sidecarset_hashes(&other));
    }

    #[test]
    fn a_native_sidecar_brings_all_init_containers_into_the_hash() {
        let mut with_native = spec(vec![sidecar("a", "a:1")]);
        with_native.init_containers = vec![native(sidecar("proxy", "p:1")), sidecar("init", "i:1")];
        let mut plain_init_changed = with_native.clone();
        plain_init_changed.init_containers[1].container.image = Some("i:2".to_owned());
        assert_ne!(
            sidecarset_hashes(&with_native).0,
            sidecarset_hashes(&plain_init_changed).0
        );
        assert_ne!(
            sidecarset_hashes(&with_native).0,
            sidecarset_hashes(&spec(vec![sidecar("a", "a:1")])).0
        );
    }

    #[test]
    fn stamp_writes_both_annotations() {
        let mut sidecar_set = SidecarSet::new("s", spec(vec![sidecar("a", "a:1")]));
        stamp_hashes(&mut sidecar_set);
        let (hash, without_image) = sidecarset_hashes(&sidecar_set.spec);
        let annotations = sidecar_set.metadata.annotations.unwrap();
        assert_eq!(annotations[HASH_ANNOTATION], hash);
        assert_eq!(annotations[HASH_WITHOUT_IMAGE_ANNOTATION], without_image);
    }
}
