//! How a SidecarContainer is read: one flat object holding a
//! `corev1.Container`'s fields and the SidecarSet's own beside them.
//!
//! serde's `flatten` would read it by buffering the fields it does not know
//! and handing them to `Container`, which loses two things: a misspelt
//! container field is dropped without a word even in strict reading (serde
//! never reports what the buffer held), and every type under `Container` is
//! compiled a second time for the buffer. Listing the container's fields here
//! keeps strict reading strict and the JS package smaller. The conversion
//! below names every field of `Container` without `..Default::default()`, so
//! a field that a new k8s-openapi adds fails the build until it is listed.

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, ContainerResizePolicy, ContainerRestartRule, EnvFromSource, EnvVar,
    Lifecycle, Probe, ResourceRequirements, SecurityContext, VolumeDevice, VolumeMount,
};
use serde::{Deserialize, Deserializer};

use crate::sidecarset::{
    PodInjectPolicy, ResourcesPolicy, ShareVolumePolicy, SidecarContainer,
    SidecarContainerUpgradeStrategy, TransferEnvVar,
};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SidecarContainerFields {
    // corev1.Container
    args: Option<Vec<String>>,
    command: Option<Vec<String>>,
    env: Option<Vec<EnvVar>>,
    env_from: Option<Vec<EnvFromSource>>,
    image: Option<String>,
    image_pull_policy: Option<String>,
    lifecycle: Option<Lifecycle>,
    liveness_probe: Option<Probe>,
    name: String,
    ports: Option<Vec<ContainerPort>>,
    readiness_probe: Option<Probe>,
    resize_policy: Option<Vec<ContainerResizePolicy>>,
    resources: Option<ResourceRequirements>,
    restart_policy: Option<String>,
    restart_policy_rules: Option<Vec<ContainerRestartRule>>,
    security_context: Option<SecurityContext>,
    startup_probe: Option<Probe>,
    stdin: Option<bool>,
    stdin_once: Option<bool>,
    termination_message_path: Option<String>,
    termination_message_policy: Option<String>,
    tty: Option<bool>,
    volume_devices: Option<Vec<VolumeDevice>>,
    volume_mounts: Option<Vec<VolumeMount>>,
    working_dir: Option<String>,
    // The SidecarSet's own.
    pod_inject_policy: Option<PodInjectPolicy>,
    upgrade_strategy: Option<SidecarContainerUpgradeStrategy>,
    share_volume_policy: Option<ShareVolumePolicy>,
    share_volume_device_policy: Option<ShareVolumePolicy>,
    #[serde(default)]
    transfer_env: Vec<TransferEnvVar>,
    resources_policy: Option<ResourcesPolicy>,
}

impl<'de> Deserialize<'de> for SidecarContainer {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        SidecarContainerFields::deserialize(deserializer).map(Self::from)
    }
}

impl From<SidecarContainerFields> for SidecarContainer {
    fn from(fields: SidecarContainerFields) -> Self {
        let container = Container {
            args: fields.args,
            command: fields.command,
            env: fields.env,
            env_from: fields.env_from,
            image: fields.image,
            image_pull_policy: fields.image_pull_policy,
            lifecycle: fields.lifecycle,
            liveness_probe: fields.liveness_probe,
            name: fields.name,
            ports: fields.ports,
            readiness_probe: fields.readiness_probe,
            resize_policy: fields.resize_policy,
            resources: fields.resources,
            restart_policy: fields.restart_policy,
            restart_policy_rules: fields.restart_policy_rules,
            security_context: fields.security_context,
            startup_probe: fields.startup_probe,
            stdin: fields.stdin,
            stdin_once: fields.stdin_once,
            termination_message_path: fields.termination_message_path,
            termination_message_policy: fields.termination_message_policy,
            tty: fields.tty,
            volume_devices: fields.volume_devices,
            volume_mounts: fields.volume_mounts,
            working_dir: fields.working_dir,
        };
        SidecarContainer {
            container,
            pod_inject_policy: fields.pod_inject_policy,
            upgrade_strategy: fields.upgrade_strategy,
            share_volume_policy: fields.share_volume_policy,
            share_volume_device_policy: fields.share_volume_device_policy,
            transfer_env: fields.transfer_env,
            resources_policy: fields.resources_policy,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::json;

    use crate::sidecarset::SidecarContainer;
    use crate::{ParseError, Strictness, from_value};

    /// Every field of `corev1.Container` set, and every one of the SidecarSet's.
    fn every_field() -> serde_json::Value {
        let probe = json!({"exec": {"command": ["true"]}, "periodSeconds": 5});
        json!({
            "args": ["-v"], "command": ["/bin/app"],
            "env": [{"name": "A", "value": "1"}],
            "envFrom": [{"configMapRef": {"name": "cm"}}],
            "image": "app:1", "imagePullPolicy": "Always",
            "lifecycle": {"preStop": {"exec": {"command": ["sleep", "1"]}}},
            "livenessProbe": probe, "name": "sidecar",
            "ports": [{"containerPort": 80}], "readinessProbe": probe,
            "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}],
            "resources": {"limits": {"cpu": "1"}}, "restartPolicy": "Always",
            "restartPolicyRules": [{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}],
            "securityContext": {"privileged": false}, "startupProbe": probe,
            "stdin": true, "stdinOnce": true,
            "terminationMessagePath": "/dev/log", "terminationMessagePolicy": "File",
            "tty": true, "volumeDevices": [{"name": "d", "devicePath": "/dev/d"}],
            "volumeMounts": [{"name": "v", "mountPath": "/v"}], "workingDir": "/w",
            "podInjectPolicy": "AfterAppContainer",
            "upgradeStrategy": {"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": "empty:1"},
            "shareVolumePolicy": {"type": "enabled"},
            "shareVolumeDevicePolicy": {"type": "disabled"},
            "transferEnv": [{"sourceContainerName": "app", "envName": "A"}],
            "resourcesPolicy": {
                "targetContainersMode": "sum", "targetContainersNameRegex": "^app$",
                "resourcesExpr": {"limits": {"cpu": "cpu*50%"}},
            },
        })
    }

    #[test]
    fn every_field_is_read_and_written_back_unchanged() {
        let sidecar: SidecarContainer = from_value(every_field(), Strictness::Strict).unwrap();
        assert_eq!(serde_json::to_value(&sidecar).unwrap(), every_field());
        // The container's fields land in the container.
        assert_eq!(sidecar.container.working_dir.as_deref(), Some("/w"));
        assert_eq!(
            sidecar.container.restart_policy_rules.map(|r| r.len()),
            Some(1)
        );
    }

    #[test]
    fn a_misspelt_container_field_is_an_unknown_field() {
        let text = json!({"name": "sidecar", "imag": "app:1", "image": "app:1"});
        match from_value::<SidecarContainer>(text.clone(), Strictness::Strict) {
            Err(ParseError::UnknownFields(fields)) => assert_eq!(fields, ["imag"]),
            other => panic!("expected an unknown field, got {other:?}"),
        }
        assert!(from_value::<SidecarContainer>(text, Strictness::Lenient).is_ok());
    }

    #[test]
    fn a_bad_container_field_is_named_by_its_path() {
        let text = json!({"name": "sidecar", "ports": [{"containerPort": "http"}]});
        match from_value::<SidecarContainer>(text, Strictness::Strict) {
            Err(ParseError::Field { path, .. }) => assert_eq!(path, "ports[0].containerPort"),
            other => panic!("expected a field error, got {other:?}"),
        }
    }

    #[test]
    fn a_container_without_a_name_is_refused() {
        let error = from_value::<SidecarContainer>(json!({"image": "a"}), Strictness::Lenient);
        assert!(
            matches!(&error, Err(ParseError::Field { message, .. }) if message == "missing field `name`"),
            "{error:?}"
        );
    }
}
