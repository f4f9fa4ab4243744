//! The dev cluster: the real Kubernetes control plane on loopback, built
//! from the upstream Go modules (see `go/`), plus simulated nodes that play
//! kubelet for pods scheduled to them.
//!
//! [`DevCluster::start`] builds what is missing, starts etcd,
//! kube-apiserver, kube-controller-manager and kube-scheduler as child
//! processes, waits until the API serves and the `default` ServiceAccount
//! exists, and writes a kubeconfig. Dropping it (or [`DevCluster::stop`])
//! stops exactly the processes it started.

mod binaries;
mod cluster;
pub mod crds;
pub mod oci;
mod pki;
pub mod ports;
mod process;
pub mod realnode;
pub mod simnode;
pub mod wait;
pub mod watch;

pub use binaries::{Binaries, BuildError};
pub use cluster::{DevCluster, Options, StartError};
pub use pki::{Pki, ServingCert};

/// Lower-case hex of some bytes (digests in ids, tokens and cache keys).
fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut out, byte| {
        let _ = write!(out, "{byte:02x}");
        out
    })
}
