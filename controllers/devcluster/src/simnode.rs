//! Simulated nodes: Node objects that keep their heartbeats, and an agent
//! that plays kubelet for the pods scheduled to them, so workloads run
//! without containers. What a container "does" is decided by the pure
//! [`kubelet::next_status`]; this module only talks to the API.
//!
//! Tests steer a pod through annotations (the fault knobs):
//! - `devcluster.kruise.io/ready-after-seconds: "N"`: each container turns
//!   ready N seconds after it (re)started;
//! - `devcluster.kruise.io/crash-loop: "a,b"`: these containers keep
//!   crashing (never ready, restartCount climbing).

mod agent;
pub mod kubelet;
mod node;

use kube::Client;
use tokio::task::JoinHandle;

pub use kubelet::{CRASH_LOOP, READY_AFTER_SECONDS};

/// Running simulated nodes; their tasks stop when this is dropped.
#[derive(Debug)]
pub struct SimNodes {
    pub names: Vec<String>,
    tasks: Vec<JoinHandle<()>>,
}

impl SimNodes {
    /// Registers `count` nodes named `sim-node-<i>` and starts playing
    /// kubelet for them.
    pub async fn start(client: Client, count: usize) -> Result<Self, kube::Error> {
        let names: Vec<String> = (1..=count).map(|i| format!("sim-node-{i}")).collect();
        let mut tasks = Vec::new();
        for (index, name) in names.iter().enumerate() {
            node::register(&client, name, index).await?;
            tasks.push(tokio::spawn(node::heartbeat(client.clone(), name.clone())));
        }
        tasks.push(tokio::spawn(agent::run(client, names.clone())));
        Ok(Self { names, tasks })
    }

    /// Registers one more node (`sim-node-<n+1>`) with its heartbeat, as
    /// a node joining later. Pods scheduled to it are not played: it is
    /// for what needs a node but no pods (NodeImages, image pulls).
    pub async fn add(&mut self, client: &Client) -> Result<String, kube::Error> {
        let index = self.names.len();
        let name = format!("sim-node-{}", index + 1);
        node::register(client, &name, index).await?;
        self.tasks
            .push(tokio::spawn(node::heartbeat(client.clone(), name.clone())));
        self.names.push(name.clone());
        Ok(name)
    }

    pub fn stop(&mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
    }
}

impl Drop for SimNodes {
    fn drop(&mut self) {
        self.stop();
    }
}
