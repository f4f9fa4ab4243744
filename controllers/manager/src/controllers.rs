//! The controllers this manager runs, each a supervised task of its own.

use kruise_controller_runtime::readiness;
pub use kruise_imagepull_controller::Options as ImagePullOptions;
use kruise_imagepull_controller::{job, nodeimage};
use kube::Client;

use crate::supervisor::Supervisor;

/// Running controllers; they stop when this is dropped.
#[derive(Debug, Default)]
pub struct Controllers {
    tasks: Supervisor,
}

impl Controllers {
    /// Starts every controller; `/readyz` waits for all their caches.
    pub fn start(client: &Client, image_pull: ImagePullOptions) -> Self {
        let mut tasks = Supervisor::default();
        let caches = [
            kruise_cloneset_controller::CONTROLLER_NAME,
            kruise_crr_controller::CONTROLLER_NAME,
            job::CONTROLLER_NAME,
            nodeimage::CONTROLLER_NAME,
            nodeimage::NODES_CACHE,
            kruise_launchpriority_controller::CONTROLLER_NAME,
            kruise_resourcedistribution_controller::CONTROLLER_NAME,
            kruise_sidecarset_controller::CONTROLLER_NAME,
        ];
        for cache in caches {
            readiness::global().expect(cache);
        }
        let c = || client.clone();
        tasks.spawn(
            kruise_cloneset_controller::CONTROLLER_NAME,
            kruise_cloneset_controller::run(c()),
        );
        tasks.spawn(
            kruise_crr_controller::CONTROLLER_NAME,
            kruise_crr_controller::run(c()),
        );
        tasks.spawn(job::CONTROLLER_NAME, job::run(c(), image_pull.clone()));
        tasks.spawn(nodeimage::CONTROLLER_NAME, nodeimage::run(c(), image_pull));
        tasks.spawn(
            kruise_launchpriority_controller::CONTROLLER_NAME,
            kruise_launchpriority_controller::run(c()),
        );
        tasks.spawn(
            kruise_resourcedistribution_controller::CONTROLLER_NAME,
            kruise_resourcedistribution_controller::run(c()),
        );
        tasks.spawn(
            kruise_sidecarset_controller::CONTROLLER_NAME,
            kruise_sidecarset_controller::run(c()),
        );
        Self { tasks }
    }

    /// No controllers at all.
    pub fn none() -> Self {
        Self::default()
    }

    /// Waits until a controller ends or panics (which it never should) and
    /// says which.
    pub async fn ended(&mut self) -> String {
        self.tasks.ended().await
    }

    pub fn stop(&mut self) {
        self.tasks.stop();
        readiness::global().clear();
    }
}
