//! The `io.kubewarden.metadata` custom section `kwctl annotate` writes:
//! policy-server refuses a waPC module whose metadata lacks
//! `protocolVersion: v1`.

use serde::Deserialize;

const SECTION: &[u8] = b"io.kubewarden.metadata";

/// The parts of the metadata this host acts on.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    #[serde(default)]
    pub protocol_version: Option<String>,
    #[serde(default = "default_execution_mode")]
    pub execution_mode: String,
    #[serde(default)]
    pub mutating: bool,
    /// The kinds the policy reads; `run --cluster-fixtures` grants them, as
    /// `kwctl run --allow-context-aware` does.
    #[serde(default)]
    pub context_aware_resources: Vec<crate::capabilities::ContextAwareResource>,
    #[serde(default)]
    pub annotations: std::collections::BTreeMap<String, String>,
}

/// The annotation with which a module says that the state
/// `validate_settings` leaves is where each evaluation may start (it keeps
/// what it prepared from the settings, and nothing else). Our host then
/// evaluates from a snapshot taken after that call; policy-server ignores
/// it.
pub const SNAPSHOT_AFTER_VALIDATE_SETTINGS: &str =
    "io.kruise-wasm/snapshot-after-validate-settings";

/// The annotation with which a module that reads the cluster says that
/// the state its `read_cluster` operation leaves (`validate_settings`, then
/// the cluster reads every evaluation starts with, each kept with the
/// answer it came from) is where each evaluation may start. Our host then
/// evaluates from a snapshot taken after that call, with the policy's host
/// calls granted, and takes it again when those calls answer otherwise
/// (`cluster_snapshot`); policy-server ignores it.
pub const SNAPSHOT_AFTER_READ_CLUSTER: &str = "io.kruise-wasm/snapshot-after-read-cluster";

/// The operation [`SNAPSHOT_AFTER_READ_CLUSTER`] names.
pub const READ_CLUSTER: &str = "read_cluster";

fn default_execution_mode() -> String {
    "kubewarden-wapc".to_owned()
}

impl Metadata {
    /// Reads the FIRST metadata section, as Kubewarden's readers do.
    pub fn of(wasm: &[u8]) -> Result<Self, String> {
        let payload = first_custom_section(wasm, SECTION).ok_or(
            "the module has no io.kubewarden.metadata section (annotate it with `kwctl annotate`)",
        )?;
        serde_json::from_slice(payload)
            .map_err(|e| format!("its io.kubewarden.metadata is not valid: {e}"))
    }

    /// Whether the module carries [`SNAPSHOT_AFTER_VALIDATE_SETTINGS`]: "true".
    pub fn snapshot_after_validate_settings(&self) -> bool {
        self.annotations
            .get(SNAPSHOT_AFTER_VALIDATE_SETTINGS)
            .is_some_and(|value| value == "true")
    }

    /// Whether the module carries [`SNAPSHOT_AFTER_READ_CLUSTER`]: "true".
    pub fn snapshot_after_read_cluster(&self) -> bool {
        self.annotations
            .get(SNAPSHOT_AFTER_READ_CLUSTER)
            .is_some_and(|value| value == "true")
    }

    /// What policy-server requires of a module before it serves it.
    pub fn check_servable(&self) -> Result<(), String> {
        if self.execution_mode != "kubewarden-wapc" {
            return Err(format!(
                "execution mode {} is not supported: only kubewarden-wapc modules are",
                self.execution_mode
            ));
        }
        match self.protocol_version.as_deref() {
            Some("v1") => Ok(()),
            Some(other) => Err(format!("protocol version {other} is not supported")),
            None => Err("Policy is missing protocol version, which is required for KubewardenWapc execution mode".to_owned()),
        }
    }
}

fn first_custom_section<'a>(wasm: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let mut rest = wasm.strip_prefix(b"\0asm\x01\0\0\0")?;
    while let Some((&id, after_id)) = rest.split_first() {
        let (size, after_size) = leb128_u32(after_id)?;
        let section = after_size.get(..size)?;
        rest = after_size.get(size..)?;
        if id == 0 {
            let (name_len, after_len) = leb128_u32(section)?;
            if after_len.get(..name_len)? == name {
                return after_len.get(name_len..);
            }
        }
    }
    None
}

/// An unsigned LEB128 of at most 5 bytes, and what follows it.
fn leb128_u32(bytes: &[u8]) -> Option<(usize, &[u8])> {
    let mut value = 0usize;
    for (i, byte) in bytes.iter().enumerate().take(5) {
        value |= usize::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, bytes.get(i + 1..)?));
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn module_with_sections(sections: &[&str]) -> Vec<u8> {
        let mut wasm = b"\0asm\x01\0\0\0".to_vec();
        for payload in sections {
            let mut body = vec![u8::try_from(SECTION.len()).unwrap()];
            body.extend_from_slice(SECTION);
            body.extend_from_slice(payload.as_bytes());
            wasm.push(0);
            wasm.push(u8::try_from(body.len()).unwrap());
            wasm.extend_from_slice(&body);
        }
        wasm
    }

    #[test]
    fn the_first_section_wins() {
        let wasm = module_with_sections(&[
            r#"{"protocolVersion":"v1","mutating":true}"#,
            r#"{"protocolVersion":"v2"}"#,
        ]);
        let metadata = Metadata::of(&wasm).unwrap();
        assert_eq!(metadata.protocol_version.as_deref(), Some("v1"));
        assert!(metadata.mutating);
        assert_eq!(metadata.execution_mode, "kubewarden-wapc");
        assert_eq!(metadata.check_servable(), Ok(()));
    }

    #[test]
    fn unannotated_or_other_modes_are_not_served() {
        assert!(
            Metadata::of(&module_with_sections(&[]))
                .unwrap_err()
                .contains("no io.kubewarden.metadata")
        );
        let missing = Metadata::of(&module_with_sections(&["{}"])).unwrap();
        assert!(
            missing
                .check_servable()
                .unwrap_err()
                .contains("missing protocol version")
        );
        let opa = Metadata::of(&module_with_sections(&[
            r#"{"protocolVersion":"v1","executionMode":"opa"}"#,
        ]))
        .unwrap();
        assert!(opa.check_servable().unwrap_err().contains("opa"));
        assert!(
            Metadata::of(b"\0asm\x01\0\0\0\0\x7f").is_err(),
            "a truncated section"
        );
    }

    #[test]
    fn a_module_asks_for_its_snapshot_by_annotation() {
        let metadata = |annotations: &str| {
            let section = format!(r#"{{"protocolVersion":"v1","annotations":{annotations}}}"#);
            Metadata::of(&module_with_sections(&[&section])).unwrap()
        };
        let key = SNAPSHOT_AFTER_VALIDATE_SETTINGS;
        assert!(metadata(&format!(r#"{{"{key}":"true"}}"#)).snapshot_after_validate_settings());
        assert!(!metadata(&format!(r#"{{"{key}":"false"}}"#)).snapshot_after_validate_settings());
        assert!(!metadata("{}").snapshot_after_validate_settings());
        let key = SNAPSHOT_AFTER_READ_CLUSTER;
        assert!(metadata(&format!(r#"{{"{key}":"true"}}"#)).snapshot_after_read_cluster());
        assert!(!metadata("{}").snapshot_after_read_cluster());
        let ours =
            |module: &kruise_policy_modules::PolicyModule| Metadata::of(module.wasm).unwrap();
        let sidecarset = ours(&kruise_policy_modules::SIDECARSET);
        assert!(sidecarset.snapshot_after_validate_settings());
        assert!(sidecarset.snapshot_after_read_cluster());
        let launch_priority = ours(&kruise_policy_modules::LAUNCH_PRIORITY);
        assert!(!launch_priority.snapshot_after_validate_settings());
        assert!(!launch_priority.snapshot_after_read_cluster());
    }

    #[test]
    fn our_modules_are_servable() {
        for module in kruise_policy_modules::ALL {
            assert_eq!(
                Metadata::of(module.wasm).unwrap().check_servable(),
                Ok(()),
                "{}",
                module.name
            );
        }
    }
}
