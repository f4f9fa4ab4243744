//! The controllers this manager runs, each a supervised task of its own.

use futures::FutureExt;
use futures::future::BoxFuture;
use kruise_cloneset_controller::CONTROLLER_NAME as CLONESET;
use kruise_controller_runtime::readiness;
use kruise_controller_runtime::shared::SharedWatches;
use kruise_crr_controller::CONTROLLER_NAME as CRR;
pub use kruise_imagepull_controller::Options as ImagePullOptions;
use kruise_imagepull_controller::{job, nodeimage};
use kruise_launchpriority_controller::CONTROLLER_NAME as LAUNCH_PRIORITY;
use kruise_podreadiness_controller::CONTROLLER_NAME as POD_READINESS;
use kruise_resourcedistribution_controller::CONTROLLER_NAME as RESOURCE_DISTRIBUTION;
use kruise_sidecarset_controller::CONTROLLER_NAME as SIDECARSET;
use kube::Client;

use crate::supervisor::Supervisor;

/// Running controllers; they stop when this is dropped.
#[derive(Debug, Default)]
pub struct Controllers {
    tasks: Supervisor,
}

impl Controllers {
    /// Starts every controller; `/readyz` waits for all their caches. The
    /// shared watches stop with the last controller that reads them.
    pub fn start(client: &Client, image_pull: ImagePullOptions) -> Self {
        let mut tasks = Supervisor::default();
        let caches = [
            CLONESET,
            CRR,
            job::CONTROLLER_NAME,
            nodeimage::CONTROLLER_NAME,
            nodeimage::NODES_CACHE,
            nodeimage::JOBS_CACHE,
            kruise_imagepull_controller::MIRRORS_CACHE,
            LAUNCH_PRIORITY,
            POD_READINESS,
            RESOURCE_DISTRIBUTION,
            SIDECARSET,
        ];
        for cache in caches {
            readiness::global().expect(cache);
        }
        let c = || client.clone();
        // One pod watch and one ControllerRevision watch for all of them,
        // and one NodeImage watch and one watch of the mirrored pull
        // secrets for the two image-pull controllers.
        let watches = SharedWatches::new(client.clone());
        let w = || watches.clone();
        let node_images = kruise_imagepull_controller::node_image_watch(client.clone());
        let mirrors = kruise_imagepull_controller::mirror_watch(client.clone(), &image_pull);
        let controllers: [(&'static str, BoxFuture<'static, ()>); 8] = [
            (CLONESET, kruise_cloneset_controller::run(c(), w()).boxed()),
            (CRR, kruise_crr_controller::run(c()).boxed()),
            (
                job::CONTROLLER_NAME,
                job::run(
                    c(),
                    image_pull.clone(),
                    watches.pods().clone(),
                    node_images.clone(),
                    mirrors.clone(),
                )
                .boxed(),
            ),
            (
                nodeimage::CONTROLLER_NAME,
                nodeimage::run(c(), image_pull, node_images, mirrors).boxed(),
            ),
            (
                LAUNCH_PRIORITY,
                kruise_launchpriority_controller::run(c(), w()).boxed(),
            ),
            (
                POD_READINESS,
                kruise_podreadiness_controller::run(c(), w()).boxed(),
            ),
            (
                RESOURCE_DISTRIBUTION,
                kruise_resourcedistribution_controller::run(c()).boxed(),
            ),
            (
                SIDECARSET,
                kruise_sidecarset_controller::run(c(), w()).boxed(),
            ),
        ];
        for (name, run) in controllers {
            tasks.spawn(name, run);
        }
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
