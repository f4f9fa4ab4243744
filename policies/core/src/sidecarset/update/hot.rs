//! Hot upgrade (spec 02 §7): each hot-upgraded sidecar runs as two twins,
//! `name-1` and `name-2`; one works, the other idles on the empty image.
//! An upgrade puts the new image on the idle twin and makes it the working
//! one (step 1); once it runs and the pod is ready (step 2) the old twin is
//! reset to the empty image (step 3). Repeated upgrades therefore alternate
//! between the twins, and the old twin keeps running until the new one is
//! ready.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use kruise_api::SidecarSet;
use kruise_api::sidecarset::SidecarContainer;

use super::consistency::is_consistent;
use super::pods::{
    empty_image, hot_sidecars, idle_twins, image, is_running_and_ready, sidecar_container_names,
    status, statuses, twin_names, working_and_idle,
};
use crate::sidecarset::sidecar_set_name;

/// Where one hot-upgraded sidecar of a pod stands, and what comes next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HotUpgradeStep {
    /// The working twin runs the SidecarSet's image, the idle one the empty
    /// image: nothing to do.
    Settled,
    /// Step 1: give `twin` the SidecarSet's image (if it does not run it
    /// already) and make it the working twin; `replaces` keeps serving until
    /// step 3.
    Upgrade { twin: String, replaces: String },
    /// Step 2: the new working twin is not running its image yet, or the pod
    /// is not ready; both twins stay as they are.
    Wait,
    /// Step 3: the new twin took over; reset `twin` (the old working one) to
    /// the empty image.
    Reset { twin: String },
}

/// The next step for the hot-upgraded sidecar container `sidecar` of the
/// SidecarSet in `pod`; `None` if the SidecarSet has no such hot-upgraded
/// container. Whether step 1 happens in a given round is still up to the
/// update strategy (selector, partition, maxUnavailable); step 3 happens as
/// soon as the pod is ready for it.
pub fn hot_upgrade_step(
    sidecar_set: &SidecarSet,
    sidecar: &str,
    pod: &Pod,
) -> Option<HotUpgradeStep> {
    let container = hot_sidecars(sidecar_set).find(|c| c.name() == sidecar)?;
    let (working, idle) = working_and_idle(sidecar, pod);
    let resetting = image(pod, &idle) != empty_image(container);
    if resetting && ready_to_reset(sidecar_set, pod) {
        return Some(HotUpgradeStep::Reset { twin: idle });
    }
    let (twin, replaces) = twin_to_upgrade(sidecar_set, container, pod);
    let desired = container.container.image.as_deref().unwrap_or_default();
    if image(pod, &replaces) == desired {
        // The image went back to the one `replaces` still runs: hand back.
        if replaces != working {
            return Some(HotUpgradeStep::Upgrade {
                twin: replaces,
                replaces: twin,
            });
        }
    } else if !(twin == working && image(pod, &twin) == desired) {
        // Unless step 1 already put the image on the working twin.
        return Some(HotUpgradeStep::Upgrade { twin, replaces });
    }
    Some(if resetting {
        HotUpgradeStep::Wait
    } else {
        HotUpgradeStep::Settled
    })
}

/// `findContainerToHotUpgrade`: `(twin to upgrade, the other twin)`. A twin
/// on the empty image first (`-1` before `-2`); else, when exactly one twin
/// is ready and running its spec image, the other one; else the idle twin.
pub(super) fn twin_to_upgrade(
    sidecar_set: &SidecarSet,
    sidecar: &SidecarContainer,
    pod: &Pod,
) -> (String, String) {
    let (first, second) = twin_names(sidecar.name());
    let empty = empty_image(sidecar);
    if image(pod, &first) == empty {
        return (first, second);
    }
    if image(pod, &second) == empty {
        return (second, first);
    }
    let name = sidecar_set_name(sidecar_set);
    let ready = |twin: &String| {
        status(pod, twin).is_some_and(|s| s.ready)
            && is_consistent(name, pod, &BTreeSet::from([twin.clone()]))
    };
    match (ready(&first), ready(&second)) {
        (true, false) => (second, first),
        (false, true) => (first, second),
        _ => {
            let (working, idle) = working_and_idle(sidecar.name(), pod);
            (idle, working)
        }
    }
}

/// Step 3 may run (spec 02 §3 step 6): some idle twin is not on the empty
/// image, every other sidecar container runs its spec image, and the pod is
/// ready apart from the idle twins. Beyond OpenKruise, the working twins'
/// own container statuses must be Ready too, so the old twin is never
/// reset while a stale pod Ready condition hides a new twin that is not.
pub(super) fn ready_to_reset(sidecar_set: &SidecarSet, pod: &Pod) -> bool {
    let in_hot_upgrade = hot_sidecars(sidecar_set).any(|sidecar| {
        let (_, idle) = working_and_idle(sidecar.name(), pod);
        image(pod, &idle) != empty_image(sidecar)
    });
    if !in_hot_upgrade {
        return false;
    }
    let idle = idle_twins(sidecar_set, pod);
    let serving: BTreeSet<String> = sidecar_container_names(sidecar_set)
        .difference(&idle)
        .cloned()
        .collect();
    let working_ready = hot_sidecars(sidecar_set).all(|sidecar| {
        let (working, _) = working_and_idle(sidecar.name(), pod);
        status(pod, &working).is_some_and(|s| s.ready)
    });
    let pod_ready = is_running_and_ready(pod)
        || statuses(pod)
            .iter()
            .filter(|s| !idle.contains(&s.name))
            .all(|s| s.ready);
    is_consistent(sidecar_set_name(sidecar_set), pod, &serving) && pod_ready && working_ready
}
