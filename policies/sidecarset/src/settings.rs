//! The policy's settings: SidecarSets given inline, or none to read them
//! from the cluster.

use std::collections::BTreeMap;

use kruise_api::{SidecarSet, Strictness, object_from_value};
use kruise_core::sidecarset::prepare_stored;
use serde::{Deserialize, Serialize};

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Settings {
    /// SidecarSet objects exactly as users write them. Absent: read the
    /// cluster's through the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sidecar_sets: Option<Vec<serde_json::Value>>,
    /// Labels of namespaces by name, for `namespaceSelector` when the
    /// SidecarSets are given inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_labels: Option<BTreeMap<String, BTreeMap<String, String>>>,
}

impl Settings {
    /// The inline SidecarSets, read strictly (a typo is an error, not a
    /// silently ignored field) and prepared as OpenKruise's SidecarSet
    /// webhook would have left them.
    pub fn inline_sidecar_sets(&self) -> Option<Result<Vec<SidecarSet>, String>> {
        let documents = self.sidecar_sets.as_ref()?;
        Some(
            documents
                .iter()
                .enumerate()
                .map(|(index, document)| {
                    object_from_value::<SidecarSet>(document.clone(), Strictness::Strict)
                        .map(prepare)
                        .map_err(|e| {
                            let name = document["metadata"]["name"].as_str().unwrap_or("unnamed");
                            format!("sidecarSets[{index}] ({name}): {e}")
                        })
                })
                .collect(),
        )
    }

    /// Checks the settings, given their inline SidecarSets as
    /// [`Settings::inline_sidecar_sets`] read them.
    pub fn validate(&self, inline: Option<Result<&[SidecarSet], &str>>) -> Result<(), String> {
        if let Some(parsed) = inline {
            let sidecar_sets = parsed.map_err(str::to_owned)?;
            let mut names: Vec<_> = sidecar_sets
                .iter()
                .filter_map(|s| s.metadata.name.as_deref())
                .collect();
            if names.len() != sidecar_sets.len() {
                return Err("every SidecarSet in sidecarSets needs metadata.name".to_owned());
            }
            names.sort_unstable();
            if let Some(name) = names.windows(2).find_map(|pair| match pair {
                [first, second] if first == second => Some(first),
                _ => None,
            }) {
                return Err(format!("sidecarSets names {name} twice"));
            }
        } else if self.namespace_labels.is_some() {
            return Err("namespaceLabels only applies with inline sidecarSets; \
                        without them namespaces are read from the cluster"
                .to_owned());
        }
        Ok(())
    }
}

/// Defaults and hashes, as OpenKruise's SidecarSet webhook leaves a stored
/// SidecarSet (see [`prepare_stored`]).
pub fn prepare(sidecar_set: SidecarSet) -> SidecarSet {
    prepare_stored(sidecar_set)
}
