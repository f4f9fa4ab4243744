//! kruise-wasm's policy host: a waPC runtime on wasmtime that runs
//! Kubewarden policies exactly as Kubewarden's policy-server does
//! (`/work/shared/spec/kubewarden-compat.md`), the admission logic around
//! it, and what the `kruise-wasm` CLI's commands are made of.

pub mod admission;
pub mod bench;
pub mod capabilities;
pub mod chain;
pub mod chains_file;
pub mod cluster_fixtures;
pub mod cluster_snapshot;
pub mod conversion;
pub mod inject;
pub mod live_cluster;
pub mod metadata;
pub mod policies_file;
pub mod policy;
pub mod runtime;
pub mod serve;
pub mod server;
