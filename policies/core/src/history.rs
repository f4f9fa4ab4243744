//! Kubernetes' controller-history naming, shared by the CloneSet and the
//! SidecarSet revisions: `rand.SafeEncodeString` and
//! `HashControllerRevision`.

use serde_json::Value;

/// Kubernetes' safe alphabet: no vowels, no look-alikes.
pub const SAFE_ALPHABET: &[u8; 27] = b"bcdfghjklmnpqrstvwxz2456789";

/// `rand.SafeEncodeString`: each byte mapped onto [`SAFE_ALPHABET`].
pub fn safe_encode(text: &str) -> String {
    text.bytes()
        .map(|b| char::from(SAFE_ALPHABET[usize::from(b) % SAFE_ALPHABET.len()]))
        .collect()
}

/// `HashControllerRevision`: FNV-1 (Go's `fnv.New32`, 32 bit) over the
/// payload's JSON as Go writes it and the collision count, printed in
/// decimal and safe-encoded.
pub fn controller_revision_hash(data: &Value, collision_count: i32) -> String {
    let json = crate::go_json::unstructured(data);
    let bytes = json.as_bytes();
    let probe = collision_count.to_string();
    let hash = bytes
        .iter()
        .chain(probe.as_bytes())
        .fold(0x811c_9dc5_u32, |hash, byte| {
            hash.wrapping_mul(0x0100_0193) ^ u32::from(*byte)
        });
    safe_encode(&hash.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn safe_encoding_maps_bytes_onto_the_alphabet() {
        // '0' is byte 48: 48 % 27 = 21 -> '4'.
        assert_eq!(safe_encode("0123456789abcdef"), "456789bcdfvwxz24");
    }

    #[test]
    fn the_hash_is_go_fnv1_of_the_bytes() {
        // FNV-1 of the empty input is the offset basis, 2166136261; with
        // the JSON `{}` and probe 0 it is Go's fnv.New32 over "{}0".
        let by_hand = b"{}0".iter().fold(0x811c_9dc5_u32, |h, b| {
            h.wrapping_mul(0x0100_0193) ^ u32::from(*b)
        });
        assert_eq!(
            controller_revision_hash(&json!({}), 0),
            safe_encode(&by_hand.to_string())
        );
        assert_ne!(
            controller_revision_hash(&json!({}), 0),
            controller_revision_hash(&json!({}), 1)
        );
    }
}
