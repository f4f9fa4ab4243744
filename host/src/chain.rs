//! Several mutating policies applied in order to one object, as
//! OpenKruise's pod webhook does (SidecarSet injection, then launch
//! priority): each sees the object as the previous one left it, and the
//! result is one patch from the original object.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

use crate::admission::{AdmissionRequest, AdmissionResponse, PatchType, json_patch_base64};
use crate::policy::Policy;

/// The outcome of a chain: the combined response and the final object.
#[derive(Debug, Clone, PartialEq)]
pub struct ChainOutcome {
    pub response: AdmissionResponse,
    /// The object after every mutation (`None` for a request without one).
    pub object: Option<Value>,
    /// The policy that rejected the request, if one did.
    pub rejected_by: Option<String>,
}

/// Runs `policies` in order. The first rejection ends the chain and is the
/// answer; warnings and audit annotations of every policy run are kept.
pub async fn run_chain(policies: &[&Policy], request: &AdmissionRequest) -> ChainOutcome {
    let original = request.object.clone();
    let mut current = request.clone();
    let mut warnings: Vec<String> = Vec::new();
    let mut audit_annotations = BTreeMap::new();
    for policy in policies {
        let response = policy.validate(&current).await;
        warnings.extend(response.warnings.iter().flatten().cloned());
        audit_annotations.extend(response.audit_annotations.clone().unwrap_or_default());
        if !response.allowed {
            return ChainOutcome {
                response: AdmissionResponse {
                    warnings: non_empty(warnings),
                    audit_annotations: non_empty_map(audit_annotations),
                    ..response
                },
                object: current.object,
                rejected_by: Some(policy.id.clone()),
            };
        }
        if let (Some(patch), Some(object)) = (&response.patch, current.object.as_mut())
            && let Err(message) = apply_base64_patch(object, patch)
        {
            return ChainOutcome {
                response: AdmissionResponse::internal_server_error(
                    &request.uid,
                    &format!("cannot apply the patch of policy {}: {message}", policy.id),
                ),
                object: current.object,
                rejected_by: Some(policy.id.clone()),
            };
        }
    }
    let patch = match (&original, &current.object) {
        (Some(before), Some(after)) => json_patch_base64(before, after),
        _ => None,
    };
    ChainOutcome {
        response: AdmissionResponse {
            uid: request.uid.clone(),
            allowed: true,
            patch_type: patch.as_ref().map(|_| PatchType::JsonPatch),
            patch,
            status: None,
            audit_annotations: non_empty_map(audit_annotations),
            warnings: non_empty(warnings),
        },
        object: current.object,
        rejected_by: None,
    }
}

fn non_empty(warnings: Vec<String>) -> Option<Vec<String>> {
    (!warnings.is_empty()).then_some(warnings)
}

fn non_empty_map(annotations: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!annotations.is_empty()).then_some(annotations)
}

/// Applies an AdmissionResponse's patch (base64 of a JSON Patch array).
pub fn apply_base64_patch(object: &mut Value, patch: &str) -> Result<(), String> {
    let bytes = STANDARD
        .decode(patch)
        .map_err(|e| format!("the patch is not base64: {e}"))?;
    let patch: json_patch::Patch = serde_json::from_slice(&bytes)
        .map_err(|e| format!("the patch is not a JSON Patch: {e}"))?;
    json_patch::patch(object, &patch).map_err(|e| e.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_patch_applies_and_garbage_is_reported() {
        let mut object = json!({"a": 1});
        let patch = json_patch_base64(&object, &json!({"a": 2, "b": [1]})).unwrap();
        apply_base64_patch(&mut object, &patch).unwrap();
        assert_eq!(object, json!({"a": 2, "b": [1]}));
        assert!(
            apply_base64_patch(&mut object, "!!")
                .unwrap_err()
                .contains("not base64")
        );
        assert!(
            apply_base64_patch(&mut object, &STANDARD.encode("{}"))
                .unwrap_err()
                .contains("not a JSON Patch")
        );
    }
}
