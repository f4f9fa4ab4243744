//! kruise-wasm's native side: the controllers (kube-rs around the pure
//! planners of kruise-core) and the dev environment that runs them with the
//! webhook host on the dev cluster.

pub mod agents;
pub mod controllers;
pub mod dev;
pub mod probes;
pub mod supervisor;
pub mod webhook;
