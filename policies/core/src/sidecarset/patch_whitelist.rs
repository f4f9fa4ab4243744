//! Which pod annotations a SidecarSet may patch (`patchPodMetadata`):
//! OpenKruise allows only the keys its cluster administrator listed, in the
//! `kruise-configuration` ConfigMap of Kruise's namespace, under
//! [`WHITELIST_KEY`], as JSON:
//!
//! ```json
//! {"rules": [{"selector": {"matchLabels": {"app": "x"}},
//!             "allowedAnnotationKeyExprs": ["key.*"]}]}
//! ```
//!
//! A rule without a selector applies to every SidecarSet; one with a
//! selector only to SidecarSets whose labels it matches. Each patched key
//! must match (anywhere in the key, as Go's `MatchString`) a pattern of an
//! applicable rule. No whitelist, or no applicable pattern, allows nothing
//! (OpenKruise's `SidecarSetPatchPodMetadataDefaultsAllowed` gate, off by
//! default, is not offered).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kruise_api::SidecarSet;
use serde::Deserialize;

use crate::selector;
use crate::validation::Violation;

/// The ConfigMap OpenKruise reads its cluster-wide configuration from.
pub const CONFIGURATION_NAME: &str = "kruise-configuration";

/// The ConfigMap key of the whitelist.
pub const WHITELIST_KEY: &str = "SidecarSet_PatchPodMetadata_WhiteList";

/// Unknown fields are ignored, as Go's `json.Unmarshal` ignores them.
#[derive(Debug, Default, Deserialize)]
struct Whitelist {
    #[serde(default)]
    rules: Vec<Rule>,
}

#[derive(Debug, Deserialize)]
struct Rule {
    #[serde(default)]
    selector: Option<LabelSelector>,
    #[serde(default, rename = "allowedAnnotationKeyExprs")]
    allowed_annotation_key_exprs: Vec<String>,
}

/// Why `set` may not patch the annotations it lists, given the data of the
/// `kruise-configuration` ConfigMap (`None`: there is none). `None` when it
/// patches nothing or every key is allowed.
pub fn check(
    set: &SidecarSet,
    configuration: Option<&BTreeMap<String, String>>,
) -> Option<Violation> {
    if set.spec.patch_pod_metadata.is_empty() {
        return None;
    }
    judge(set, configuration)
        .err()
        .map(|reason| Violation::new("spec.patchPodMetadata", format!("Required value: {reason}")))
}

fn judge(set: &SidecarSet, configuration: Option<&BTreeMap<String, String>>) -> Result<(), String> {
    let Some(text) = configuration.and_then(|data| data.get(WHITELIST_KEY)) else {
        return Err("SidecarSet patch metadata whitelist not found".to_owned());
    };
    let whitelist: Whitelist = serde_json::from_str(text).map_err(|e| {
        format!("{CONFIGURATION_NAME} {WHITELIST_KEY} is not a valid whitelist: {e}")
    })?;
    let labels = set.metadata.labels.clone().unwrap_or_default();
    let mut patterns = Vec::new();
    for rule in &whitelist.rules {
        if let Some(rule_selector) = &rule.selector {
            let applies = selector::matches(rule_selector, &labels)
                .map_err(|e| format!("{CONFIGURATION_NAME} {WHITELIST_KEY}: selector: {e}"))?;
            if !applies {
                continue;
            }
        }
        for expression in &rule.allowed_annotation_key_exprs {
            let pattern = regex_lite::Regex::new(expression).map_err(|e| {
                format!("{CONFIGURATION_NAME} {WHITELIST_KEY}: {expression:?}: {e}")
            })?;
            patterns.push(pattern);
        }
    }
    if patterns.is_empty() {
        return Err("sidecarSet patch metadata annotation is not allowed".to_owned());
    }
    for patch in &set.spec.patch_pod_metadata {
        for key in patch.annotations.keys() {
            if !patterns.iter().any(|p| p.is_match(key)) {
                return Err(format!(
                    "sidecarSet patch metadata annotation({key}) is not allowed"
                ));
            }
        }
    }
    Ok(())
}
