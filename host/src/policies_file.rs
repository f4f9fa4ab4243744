//! `policies.yml` as policy-server reads it (spec §3.2): a map from policy
//! id to an individual policy. Groups are recognised and refused for now.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::admission::PolicyMode;
use crate::capabilities::ContextAwareResource;

/// One individual policy entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyEntry {
    /// A path or a `file://` URL.
    pub module: String,
    #[serde(default)]
    pub policy_mode: PolicyMode,
    #[serde(default)]
    pub allowed_to_mutate: Option<bool>,
    #[serde(default)]
    pub settings: Value,
    #[serde(default)]
    pub context_aware_resources: Vec<ContextAwareResource>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub timeout_eval_seconds: Option<u64>,
    /// Absent or empty denies every host capability (policy-server >= 1.35).
    #[serde(default)]
    pub host_capabilities: Vec<String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PoliciesFileError {
    #[error("policies file is not valid YAML: {0}")]
    Yaml(String),
    #[error("policies file must map policy ids to policies")]
    NotAMap,
    #[error("policy id `{0}` must not contain `/`")]
    SlashInId(String),
    #[error("policy `{id}`: policy groups are not supported yet")]
    Group { id: String },
    #[error("policy `{id}`: {message}")]
    Invalid { id: String, message: String },
    #[error(
        "policy `{id}`: module `{module}` is not a local file: only paths and file:// URLs are supported"
    )]
    RemoteModule { id: String, module: String },
}

/// Parses the file's text; entries keep their ids, sorted.
pub fn parse(text: &str) -> Result<BTreeMap<String, PolicyEntry>, PoliciesFileError> {
    let document: Value =
        serde_yaml::from_str(text).map_err(|e| PoliciesFileError::Yaml(e.to_string()))?;
    let entries = match document {
        Value::Object(entries) => entries,
        Value::Null => serde_json::Map::new(),
        _ => return Err(PoliciesFileError::NotAMap),
    };
    entries
        .into_iter()
        .map(|(id, entry)| {
            if id.contains('/') {
                return Err(PoliciesFileError::SlashInId(id));
            }
            // A group is told apart by the members it lists.
            if entry.get("policies").is_some() || entry.get("expression").is_some() {
                return Err(PoliciesFileError::Group { id });
            }
            match serde_json::from_value::<PolicyEntry>(entry) {
                Ok(entry) => Ok((id, entry)),
                Err(e) => Err(PoliciesFileError::Invalid {
                    id,
                    message: e.to_string(),
                }),
            }
        })
        .collect()
}

/// Where an entry's module lives: `file://` URLs are absolute, bare paths
/// are relative to the policies file.
pub fn module_path(
    id: &str,
    module: &str,
    policies_dir: &Path,
) -> Result<PathBuf, PoliciesFileError> {
    if let Some(path) = module.strip_prefix("file://") {
        return Ok(PathBuf::from(path));
    }
    if module.contains("://") {
        return Err(PoliciesFileError::RemoteModule {
            id: id.to_owned(),
            module: module.to_owned(),
        });
    }
    Ok(policies_dir.join(module))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_individual_policy_with_every_field() {
        let entries = parse(
            r"
psp-capabilities:
  module: file:///policies/caps.wasm
  policyMode: monitor
  allowedToMutate: true
  settings:
    allowed_capabilities: [CHOWN]
  contextAwareResources:
  - apiVersion: v1
    kind: Namespace
  message: custom rejection text
  timeoutEvalSeconds: 5
  hostCapabilities: ['*']
  namespacedName: ignored/by-policy-server
minimal:
  module: minimal.wasm
",
        )
        .unwrap();
        let full = &entries["psp-capabilities"];
        assert_eq!(full.policy_mode, PolicyMode::Monitor);
        assert_eq!(full.allowed_to_mutate, Some(true));
        assert_eq!(full.settings["allowed_capabilities"][0], "CHOWN");
        assert_eq!(full.context_aware_resources[0].kind, "Namespace");
        assert_eq!(full.message.as_deref(), Some("custom rejection text"));
        assert_eq!(full.timeout_eval_seconds, Some(5));
        assert_eq!(full.host_capabilities, vec!["*".to_owned()]);

        let minimal = &entries["minimal"];
        assert_eq!(minimal.policy_mode, PolicyMode::Protect);
        assert_eq!(minimal.allowed_to_mutate, None);
        assert_eq!(minimal.settings, Value::Null);
        assert!(minimal.host_capabilities.is_empty());
    }

    #[test]
    fn groups_are_refused_by_name() {
        let error = parse(
            "my-group:\n  expression: a()\n  message: m\n  policies:\n    a: {module: a.wasm}\n",
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "policy `my-group`: policy groups are not supported yet"
        );
    }

    #[test]
    fn bad_entries_name_their_policy() {
        assert_eq!(
            parse("a/b:\n  module: x.wasm\n").unwrap_err(),
            PoliciesFileError::SlashInId("a/b".to_owned())
        );
        let error = parse("p:\n  policyMode: loud\n  module: x.wasm\n").unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("policy `p`: unknown variant `loud`"),
            "{error}"
        );
        let error = parse("p:\n  settings: {}\n").unwrap_err();
        assert!(
            error.to_string().contains("missing field `module`"),
            "{error}"
        );
        assert_eq!(parse("- a\n").unwrap_err(), PoliciesFileError::NotAMap);
        assert!(parse("").unwrap().is_empty());
    }

    #[test]
    fn modules_are_local_files() {
        let dir = Path::new("/etc/kw");
        assert_eq!(
            module_path("p", "file:///abs/p.wasm", dir).unwrap(),
            PathBuf::from("/abs/p.wasm")
        );
        assert_eq!(
            module_path("p", "rel/p.wasm", dir).unwrap(),
            PathBuf::from("/etc/kw/rel/p.wasm")
        );
        let error = module_path("p", "registry://ghcr.io/x:v1", dir).unwrap_err();
        assert!(error.to_string().contains("not a local file"), "{error}");
    }
}
