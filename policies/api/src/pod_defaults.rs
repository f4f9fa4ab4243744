//! The defaults the Kubernetes API server gives containers and volumes.
//! OpenKruise applies them to SidecarSet containers before hashing, so an
//! unchanged spec written with or without them hashes the same.

use k8s_openapi::api::core::v1::{
    Container, EnvVar, HTTPGetAction, PodSecurityContext, PodSpec, Probe, Volume,
};

/// `0644`, the mode of projected files when none is given.
const DEFAULT_FILE_MODE: i32 = 0o644;

/// What the API server gives a pod spec (Kubernetes' `SetDefaults_PodSpec`
/// and each container's and volume's defaults), as OpenKruise applies it to
/// workload templates.
pub fn default_pod_spec(spec: &mut PodSpec) {
    spec.dns_policy
        .get_or_insert_with(|| "ClusterFirst".to_owned());
    spec.restart_policy
        .get_or_insert_with(|| "Always".to_owned());
    spec.security_context
        .get_or_insert_with(PodSecurityContext::default);
    spec.termination_grace_period_seconds.get_or_insert(30);
    spec.scheduler_name
        .get_or_insert_with(|| "default-scheduler".to_owned());
    for volume in spec.volumes.iter_mut().flatten() {
        default_volume(volume);
    }
    let init_containers = spec.init_containers.iter_mut().flatten();
    for container in init_containers.chain(&mut spec.containers) {
        default_container(container);
    }
}

pub fn default_container(container: &mut Container) {
    container
        .termination_message_path
        .get_or_insert_with(|| "/dev/termination-log".to_owned());
    container
        .termination_message_policy
        .get_or_insert_with(|| "File".to_owned());
    if container.image_pull_policy.is_none()
        && let Some(image) = &container.image
    {
        container.image_pull_policy = Some(default_pull_policy(image).to_owned());
    }
    for port in container.ports.iter_mut().flatten() {
        port.protocol.get_or_insert_with(|| "TCP".to_owned());
    }
    for env in container.env.iter_mut().flatten() {
        default_env(env);
    }
    for probe in [
        &mut container.liveness_probe,
        &mut container.readiness_probe,
        &mut container.startup_probe,
    ]
    .into_iter()
    .flatten()
    {
        default_probe(probe);
    }
    if let Some(lifecycle) = &mut container.lifecycle {
        for handler in [&mut lifecycle.post_start, &mut lifecycle.pre_stop]
            .into_iter()
            .flatten()
        {
            if let Some(http) = &mut handler.http_get {
                default_http_get(http);
            }
        }
    }
}

/// `Always` for `:latest` or an untagged image, else `IfNotPresent`.
pub fn default_pull_policy(image: &str) -> &'static str {
    if image_tag(image).is_none_or(|tag| tag == "latest") && !image.contains('@') {
        "Always"
    } else {
        "IfNotPresent"
    }
}

/// The tag of an image reference: after the last `:` of the last path part.
pub fn image_tag(image: &str) -> Option<&str> {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last_part = without_digest.rsplit('/').next().unwrap_or(without_digest);
    last_part.split_once(':').map(|(_, tag)| tag)
}

fn default_env(env: &mut EnvVar) {
    if let Some(field_ref) = env.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
        field_ref.api_version.get_or_insert_with(|| "v1".to_owned());
    }
}

fn default_probe(probe: &mut Probe) {
    probe.timeout_seconds.get_or_insert(1);
    probe.period_seconds.get_or_insert(10);
    probe.success_threshold.get_or_insert(1);
    probe.failure_threshold.get_or_insert(3);
    if let Some(http) = &mut probe.http_get {
        default_http_get(http);
    }
}

fn default_http_get(http: &mut HTTPGetAction) {
    http.path.get_or_insert_with(|| "/".to_owned());
    http.scheme.get_or_insert_with(|| "HTTP".to_owned());
}

pub fn default_volume(volume: &mut Volume) {
    if let Some(config_map) = &mut volume.config_map {
        config_map.default_mode.get_or_insert(DEFAULT_FILE_MODE);
    }
    if let Some(secret) = &mut volume.secret {
        secret.default_mode.get_or_insert(DEFAULT_FILE_MODE);
    }
    if let Some(downward) = &mut volume.downward_api {
        downward.default_mode.get_or_insert(DEFAULT_FILE_MODE);
        for item in downward.items.iter_mut().flatten() {
            if let Some(field_ref) = &mut item.field_ref {
                field_ref.api_version.get_or_insert_with(|| "v1".to_owned());
            }
        }
    }
    if let Some(projected) = &mut volume.projected {
        projected.default_mode.get_or_insert(DEFAULT_FILE_MODE);
    }
    if let Some(host_path) = &mut volume.host_path {
        host_path.type_.get_or_insert_with(String::new);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn pull_policy_follows_the_tag() {
        assert_eq!(default_pull_policy("nginx"), "Always");
        assert_eq!(default_pull_policy("nginx:latest"), "Always");
        assert_eq!(default_pull_policy("nginx:1.25"), "IfNotPresent");
        assert_eq!(default_pull_policy("localhost:5000/nginx"), "Always");
        assert_eq!(
            default_pull_policy("localhost:5000/nginx:1.2"),
            "IfNotPresent"
        );
        assert_eq!(default_pull_policy("nginx@sha256:abcd"), "IfNotPresent");
    }

    #[test]
    fn pod_spec_defaults_fill_only_what_is_missing() {
        let mut spec: PodSpec = serde_json::from_value(serde_json::json!({
            "restartPolicy": "Never",
            "initContainers": [{"name": "i", "image": "busybox"}],
            "containers": [{"name": "c", "image": "nginx:1.25", "ports": [{"containerPort": 80}]}],
            "volumes": [{"name": "v", "configMap": {"name": "cm"}}],
        }))
        .unwrap();
        default_pod_spec(&mut spec);
        assert_eq!(
            serde_json::to_value(&spec).unwrap(),
            serde_json::json!({
                "dnsPolicy": "ClusterFirst",
                "restartPolicy": "Never",
                "schedulerName": "default-scheduler",
                "securityContext": {},
                "terminationGracePeriodSeconds": 30,
                "initContainers": [{
                    "name": "i", "image": "busybox", "imagePullPolicy": "Always",
                    "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                }],
                "containers": [{
                    "name": "c", "image": "nginx:1.25", "imagePullPolicy": "IfNotPresent",
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                }],
                "volumes": [{"name": "v", "configMap": {"name": "cm", "defaultMode": 420}}],
            })
        );
    }

    #[test]
    fn container_defaults_fill_only_what_is_missing() {
        let mut container = Container {
            name: "c".into(),
            image: Some("busybox:1.36".into()),
            termination_message_path: Some("/custom".into()),
            ..Default::default()
        };
        default_container(&mut container);
        assert_eq!(
            container.termination_message_path.as_deref(),
            Some("/custom")
        );
        assert_eq!(
            container.termination_message_policy.as_deref(),
            Some("File")
        );
        assert_eq!(container.image_pull_policy.as_deref(), Some("IfNotPresent"));
    }
}
