//! Putting the built sidecars into the pod (spec 01 §3.8, §3.9).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, LocalObjectReference, Pod, Volume};

use super::InjectionError;
use super::containers::{Built, Emitted};

/// Two sidecars with one name would make an invalid pod; refuse it here,
/// naming both SidecarSets, rather than let the API server refuse the pod.
/// Init and regular containers share one name space in a pod.
pub(super) fn check_conflicts(built: &Built) -> Result<(), InjectionError> {
    let mut owners: BTreeMap<&str, &str> = BTreeMap::new();
    for emitted in built.init_containers.iter().chain(&built.containers) {
        if let Some(first) = owners.insert(&emitted.container.name, &emitted.sidecar_set) {
            return Err(InjectionError::ContainerConflict {
                container: emitted.container.name.clone(),
                first: first.to_owned(),
                second: emitted.sidecar_set.clone(),
            });
        }
    }
    Ok(())
}

/// Init containers (sorted by name), containers, volumes, pull secrets.
pub(super) fn apply(pod: &mut Pod, built: Built) {
    let spec = pod.spec.get_or_insert_with(Default::default);
    let mut init_containers = built.init_containers;
    if !init_containers.is_empty() {
        crate::ordered::sort_by(&mut init_containers, |a, b| {
            a.container.name.cmp(&b.container.name)
        });
        let existing = spec.init_containers.take().unwrap_or_default();
        spec.init_containers = Some(merge_containers(existing, init_containers));
    }
    spec.containers = merge_containers(std::mem::take(&mut spec.containers), built.containers);
    if !built.volumes.is_empty() {
        let existing = spec.volumes.take().unwrap_or_default();
        spec.volumes = Some(merge_volumes(existing, built.volumes));
    }
    let secrets = merge_secrets(
        spec.image_pull_secrets.as_deref().unwrap_or_default(),
        &built.pull_secrets,
    );
    if !secrets.is_empty() {
        spec.image_pull_secrets = Some(secrets);
    }
}

/// A sidecar whose name the pod already has replaces that container where
/// it stands; new `BeforeAppContainer` sidecars go first, the rest last.
fn merge_containers(mut pod: Vec<Container>, injected: Vec<Emitted>) -> Vec<Container> {
    let positions: BTreeMap<String, usize> =
        crate::ordered::map(pod.iter().enumerate().map(|(i, c)| (c.name.clone(), i)));
    let mut before = Vec::new();
    let mut after = Vec::new();
    for emitted in injected {
        if let Some(&position) = positions.get(&emitted.container.name) {
            pod[position] = emitted.container;
        } else if emitted.before_app {
            before.push(emitted.container);
        } else {
            after.push(emitted.container);
        }
    }
    before.extend(pod);
    before.extend(after);
    before
}

/// The pod's volumes, then queued ones with a new name (the pod's wins,
/// then the first queued).
fn merge_volumes(mut pod: Vec<Volume>, queued: Vec<Volume>) -> Vec<Volume> {
    let mut names = crate::ordered::set(pod.iter().map(|v| v.name.clone()));
    for volume in queued {
        if names.insert(volume.name.clone()) {
            pod.push(volume);
        }
    }
    pod
}

/// Distinct by name: the pod's secrets first, then the SidecarSets'.
fn merge_secrets(
    pod: &[LocalObjectReference],
    sidecars: &[LocalObjectReference],
) -> Vec<LocalObjectReference> {
    let mut names = BTreeSet::new();
    pod.iter()
        .chain(sidecars)
        .filter(|s| names.insert(s.name.clone()))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn containers(names: &[&str]) -> Vec<Container> {
        names
            .iter()
            .map(|n| Container {
                name: (*n).to_owned(),
                ..Default::default()
            })
            .collect()
    }

    /// `name` for AfterAppContainer, `name:B` for BeforeAppContainer.
    fn injected(specs: &[&str]) -> Vec<Emitted> {
        specs
            .iter()
            .map(|spec| {
                let (name, before_app) = match spec.strip_suffix(":B") {
                    Some(name) => (name, true),
                    None => (*spec, false),
                };
                Emitted {
                    container: Container {
                        name: name.to_owned(),
                        image: Some("injected".to_owned()),
                        ..Default::default()
                    },
                    before_app,
                    sidecar_set: "s".to_owned(),
                }
            })
            .collect()
    }

    fn names(list: &[Container]) -> Vec<&str> {
        list.iter().map(|c| c.name.as_str()).collect()
    }

    // Upstream TestMergeSidecarContainers (spec 01 §3.9 table).
    #[test]
    fn merge_sidecar_containers_table() {
        let all = ["sidecar-1", "sidecar-2", "new-sidecar-1:B"];
        let cases: [(&[&str], &[&str], &[&str]); 6] = [
            (
                &["app-container"],
                &all,
                &["new-sidecar-1", "app-container", "sidecar-1", "sidecar-2"],
            ),
            (
                &["app-container"],
                &all[2..],
                &["new-sidecar-1", "app-container"],
            ),
            (
                &["app-container"],
                &all[..2],
                &["app-container", "sidecar-1", "sidecar-2"],
            ),
            (
                &["sidecar-1", "app-container", "sidecar-2"],
                &all[..2],
                &["sidecar-1", "app-container", "sidecar-2"],
            ),
            (
                &["sidecar-1", "app-container", "sidecar-2"],
                &all,
                &["new-sidecar-1", "sidecar-1", "app-container", "sidecar-2"],
            ),
            (&[], &all, &["new-sidecar-1", "sidecar-1", "sidecar-2"]),
        ];
        for (pod, sidecars, expected) in cases {
            let merged = merge_containers(containers(pod), injected(sidecars));
            assert_eq!(names(&merged), expected, "pod {pod:?} + {sidecars:?}");
        }
    }

    #[test]
    fn existing_container_is_replaced_in_place() {
        let merged = merge_containers(
            containers(&["sidecar-1", "app"]),
            injected(&["sidecar-1:B"]),
        );
        assert_eq!(names(&merged), ["sidecar-1", "app"]);
        assert_eq!(merged[0].image.as_deref(), Some("injected"));
    }

    // Upstream TestInjectInitContainerSort: injected list sorted by name first.
    #[test]
    fn inject_init_container_sort_table() {
        let cases: [(&[&str], &[&str], &[&str]); 3] = [
            (
                &[],
                &["a-init", "c-init", "b-init"],
                &["a-init", "b-init", "c-init"],
            ),
            (
                &["app1-init", "app2-init"],
                &["a-init", "c-init", "b-init"],
                &["app1-init", "app2-init", "a-init", "b-init", "c-init"],
            ),
            (
                &["app1-init", "app2-init"],
                &["a-init", "c-init:B", "b-init:B"],
                &["b-init", "c-init", "app1-init", "app2-init", "a-init"],
            ),
        ];
        for (pod, sidecars, expected) in cases {
            let mut pod_spec = Pod::default();
            pod_spec
                .spec
                .get_or_insert_with(Default::default)
                .init_containers = Some(containers(pod));
            let built = Built {
                init_containers: injected(sidecars),
                ..Default::default()
            };
            apply(&mut pod_spec, built);
            let init = pod_spec.spec.unwrap().init_containers.unwrap();
            assert_eq!(names(&init), expected, "pod {pod:?} + {sidecars:?}");
        }
    }

    fn secrets(names: &[&str]) -> Vec<LocalObjectReference> {
        names
            .iter()
            .map(|n| LocalObjectReference {
                name: (*n).to_owned(),
            })
            .collect()
    }

    // Upstream TestMergeSidecarSecrets.
    #[test]
    fn merge_sidecar_secrets() {
        let sidecar = secrets(&["s0", "s1", "s2"]);
        let merged = merge_secrets(&secrets(&["s2", "s3", "s3"]), &sidecar);
        assert_eq!(merged, secrets(&["s2", "s3", "s0", "s1"]));
        assert_eq!(
            merge_secrets(&secrets(&["s3", "s4", "s5"]), &sidecar).len(),
            6
        );
        assert_eq!(merge_secrets(&[], &sidecar), sidecar);
        assert_eq!(merge_secrets(&secrets(&["s3", "s4", "s5"]), &[]).len(), 3);
    }

    #[test]
    fn pod_volume_wins_then_first_queued() {
        let volume = |name: &str, medium: &str| Volume {
            name: name.to_owned(),
            empty_dir: Some(k8s_openapi::api::core::v1::EmptyDirVolumeSource {
                medium: Some(medium.to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let merged = merge_volumes(
            vec![volume("a", "pod")],
            vec![
                volume("a", "set"),
                volume("b", "first"),
                volume("b", "second"),
            ],
        );
        assert_eq!(merged, vec![volume("a", "pod"), volume("b", "first")]);
    }

    #[test]
    fn conflicting_sidecars_name_both_sidecar_sets() {
        let mut first = injected(&["proxy"]);
        first[0].sidecar_set = "alpha".to_owned();
        let mut second = injected(&["proxy"]);
        second[0].sidecar_set = "beta".to_owned();
        let built = Built {
            init_containers: first,
            containers: second,
            ..Default::default()
        };
        let err = check_conflicts(&built).unwrap_err();
        assert_eq!(
            err,
            InjectionError::ContainerConflict {
                container: "proxy".to_owned(),
                first: "alpha".to_owned(),
                second: "beta".to_owned(),
            }
        );
    }
}
