//! The node agent: one process per node (a DaemonSet in a real cluster,
//! one task per node in the dev environment). It watches only what
//! concerns its own node and reaches the containers through a
//! [`runtime::ContainerRuntime`].

pub mod agent;
pub mod cri;
mod hooks;
pub mod images;
pub mod runtime;
pub mod sim;

/// Everything the agent does for `node`: container recreation and image
/// pulls, on one runtime, until the task is dropped.
pub async fn run<R: runtime::ContainerRuntime>(client: kube::Client, node: String, runtime: R) {
    futures::join!(
        agent::run(client.clone(), node.clone(), runtime.clone()),
        images::run(client, node, runtime),
    );
}
