//! The node agent: one process per node (a DaemonSet in a real cluster,
//! one task per node in the dev environment). It watches only what
//! concerns its own node and reaches the containers through a
//! [`runtime::ContainerRuntime`].

pub mod agent;
pub mod cri;
mod hooks;
pub mod runtime;
pub mod sim;
