//! kruise-wasm's native side: the controllers (kube-rs around the pure
//! planners of kruise-core) and (feature `dev`, on by default) the dev
//! environment that runs them with the webhook host on the dev cluster.

#[cfg(feature = "dev")]
pub mod agents;
pub mod certs;
pub mod controllers;
#[cfg(feature = "dev")]
pub mod deploy;
#[cfg(feature = "dev")]
pub mod dev;
#[cfg(feature = "dev")]
pub mod images;
#[cfg(feature = "dev")]
pub mod in_cluster;
pub mod probes;
#[cfg(feature = "dev")]
pub mod scale_bench;
pub mod supervisor;
pub mod webhook;
pub mod webhook_certs;
