//! The controllers this manager runs, each a task of its own.

pub use kruise_imagepull_controller::Options as ImagePullOptions;
use kube::Client;
use tokio::task::JoinHandle;

/// Running controllers; they stop when this is dropped.
#[derive(Debug)]
pub struct Controllers {
    tasks: Vec<JoinHandle<()>>,
}

impl Controllers {
    pub fn start(client: &Client, image_pull: ImagePullOptions) -> Self {
        let tasks = vec![
            tokio::spawn(kruise_cloneset_controller::run(client.clone())),
            tokio::spawn(kruise_crr_controller::run(client.clone())),
            tokio::spawn(kruise_imagepull_controller::run(client.clone(), image_pull)),
            tokio::spawn(kruise_launchpriority_controller::run(client.clone())),
            tokio::spawn(kruise_resourcedistribution_controller::run(client.clone())),
            tokio::spawn(kruise_sidecarset_controller::run(client.clone())),
        ];
        Self { tasks }
    }

    /// No controllers at all.
    pub fn none() -> Self {
        Self { tasks: Vec::new() }
    }

    pub fn stop(&mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
    }
}

impl Drop for Controllers {
    fn drop(&mut self) {
        self.stop();
    }
}
