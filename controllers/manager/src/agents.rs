//! The node agents of the dev environment: one per node, each a task, on
//! the simulated runtime for the simulated nodes and on containerd's CRI
//! socket for the real node.

use std::path::Path;

use kruise_node_agent::cri::CriRuntime;
use kruise_node_agent::sim::SimRuntime;
use kube::Client;
use tokio::task::JoinHandle;

/// Running node agents; they stop when this is dropped.
#[derive(Debug, Default)]
pub struct NodeAgents {
    tasks: Vec<JoinHandle<()>>,
}

impl NodeAgents {
    /// Starts an agent for each simulated node, and one for the real node
    /// (its name and CRI socket) if there is one.
    pub async fn start(
        client: &Client,
        sim_nodes: &[String],
        real_node: Option<(&str, &Path)>,
    ) -> Result<Self, String> {
        let mut tasks = Vec::new();
        for node in sim_nodes {
            let runtime = SimRuntime::new(client.clone(), node);
            let agent = kruise_node_agent::run(client.clone(), node.clone(), runtime);
            tasks.push(tokio::spawn(agent));
        }
        if let Some((node, socket)) = real_node {
            let runtime = CriRuntime::connect(Some(socket))
                .await
                .map_err(|e| format!("the real node's agent cannot reach containerd: {e}"))?;
            let agent = kruise_node_agent::run(client.clone(), node.to_owned(), runtime);
            tasks.push(tokio::spawn(agent));
        }
        Ok(Self { tasks })
    }

    /// Starts the agent of one more simulated node.
    pub fn add_sim(&mut self, client: &Client, node: &str) {
        let runtime = SimRuntime::new(client.clone(), node);
        let agent = kruise_node_agent::run(client.clone(), node.to_owned(), runtime);
        self.tasks.push(tokio::spawn(agent));
    }

    pub fn stop(&mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
    }
}

impl Drop for NodeAgents {
    fn drop(&mut self) {
        self.stop();
    }
}
