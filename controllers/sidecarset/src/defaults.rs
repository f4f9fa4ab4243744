//! Persisting the SidecarSet defaults (spec 01 §2 step 1).
//!
//! OpenKruise's SidecarSet mutating webhook stores the defaulted spec, so a
//! later image-only edit keeps the defaults that came from the old image:
//! `busybox` defaults `imagePullPolicy: Always`, and patching the image to
//! `busybox:1.35.0` leaves `Always` in place. Our `mutate-defaults` module
//! does the same at admission; a SidecarSet written while it was not there
//! would, defaulted on every read, turn that policy into `IfNotPresent`,
//! change the without-image hash and make every pod "not upgradable". So
//! the controller writes the defaulted spec back once for such a
//! SidecarSet (guarded by the resourceVersion it read). It stamps no hash
//! annotations: without them injection and controller both compute the
//! hashes from the spec.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use kruise_api::{KruiseObject, SidecarSet};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use crate::CONTROLLER_NAME;

/// SidecarSet name → the generation our last defaults write produced, so a
/// spec the API server stores differently (should never happen) is not
/// written again and again.
#[derive(Debug, Default)]
pub struct Defaulted {
    written: Mutex<HashMap<String, i64>>,
}

/// What [`Defaulted::persist`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Persisted {
    /// The stored spec is already defaulted (or was already written once).
    Unchanged,
    /// The defaulted spec was written; the watch brings it back.
    Written,
}

/// The stored spec lacks some default.
pub fn needs_defaults(stored: &SidecarSet) -> bool {
    let mut defaulted = stored.clone();
    defaulted.set_defaults();
    defaulted.spec != stored.spec
}

impl Defaulted {
    pub async fn persist(
        &self,
        client: &Client,
        stored: &SidecarSet,
    ) -> Result<Persisted, kube::Error> {
        let name = stored.metadata.name.clone().unwrap_or_default();
        if !needs_defaults(stored) {
            return Ok(Persisted::Unchanged);
        }
        let generation = stored.metadata.generation.unwrap_or(0);
        {
            let written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
            if written.get(&name) == Some(&generation) {
                return Ok(Persisted::Unchanged);
            }
        }
        let mut defaulted = stored.clone();
        defaulted.set_defaults();
        let patch = json!({
            "metadata": { "resourceVersion": stored.metadata.resource_version },
            "spec": defaulted.spec,
        });
        let params = PatchParams {
            field_manager: Some(CONTROLLER_NAME.to_owned()),
            ..PatchParams::default()
        };
        let api: Api<SidecarSet> = Api::all(client.clone());
        let written = api.patch(&name, &params, &Patch::Merge(patch)).await?;
        tracing::info!(sidecar_set = %name, "stored the defaulted spec");
        self.written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name, written.metadata.generation.unwrap_or(0));
        Ok(Persisted::Written)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn set(container: &serde_json::Value) -> SidecarSet {
        serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "SidecarSet",
            "metadata": {"name": "s"},
            "spec": {
                "selector": {"matchLabels": {"app": "nginx"}},
                "containers": [container],
            },
        }))
        .unwrap()
    }

    #[test]
    fn a_defaulted_spec_keeps_its_pull_policy_across_an_image_change() {
        let stored = set(&json!({"name": "sidecar1", "image": "busybox"}));
        assert!(needs_defaults(&stored));
        let mut defaulted = stored.clone();
        defaulted.set_defaults();
        assert!(!needs_defaults(&defaulted));
        let policy = |s: &SidecarSet| s.spec.containers[0].container.image_pull_policy.clone();
        assert_eq!(policy(&defaulted).as_deref(), Some("Always"));
        // The user's image-only patch on the stored (defaulted) object.
        let mut patched = defaulted.clone();
        patched.spec.containers[0].container.image = Some("busybox:1.35.0".to_owned());
        assert!(!needs_defaults(&patched));
        let (_, before) = kruise_core::sidecarset::sidecarset_hashes(&defaulted.spec);
        let (_, after) = kruise_core::sidecarset::sidecarset_hashes(&patched.spec);
        assert_eq!(before, after);
    }
}
