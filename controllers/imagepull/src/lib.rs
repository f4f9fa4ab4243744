//! The NodeImage and ImagePullJob controllers of kruise-manager (two tasks).
//!
//! - [`nodeimage`]: one NodeImage per Ready node (named after it, its
//!   labels the node's, deleted with it), its spec cleaned of tags whose
//!   jobs are gone or whose TTL passed, and a watchdog that fails the tags
//!   a node never answered for.
//! - [`job`]: each ImagePullJob writes its tag into its target NodeImages,
//!   never more than `parallelism` nodes pulling at once, mirrors its pull
//!   secrets for the node agents, keeps its status, and is deleted after
//!   its TTL.
//!
//! The node agent does the pulls and reports in the NodeImage's status.
//! Both read NodeImages and the mirrored pull secrets from shared watches:
//! the ImagePullJob controller once they show its own writes, the
//! NodeImage controller confirming fresh what a lagging watch would make
//! it delete.
//! Every decision is `kruise_core::imagepull`'s.

pub mod job;
pub mod nodeimage;

use k8s_openapi::api::core::v1::Secret;
use kruise_api::{NodeImage, Stored};
use kruise_controller_runtime::shared::SharedWatch;
use kube::Client;

/// The NodeImage watch both controllers share (started at once: call it
/// inside the tokio runtime).
pub fn node_image_watch(client: Client) -> SharedWatch<Stored<NodeImage>> {
    SharedWatch::all(client)
}

/// The readiness name of the watch of the agents' namespace's Secrets.
pub const MIRRORS_CACHE: &str = "kruise-imagepull/mirrored-pull-secrets";

/// The watch both controllers share of the Secrets in the agents'
/// namespace, where pull secrets are mirrored (started at once, and
/// tracked for readiness as [`MIRRORS_CACHE`]).
pub fn mirror_watch(client: Client, options: &Options) -> SharedWatch<Secret> {
    let watch = SharedWatch::namespaced(client, &options.config_namespace);
    kruise_controller_runtime::readiness::global().track(MIRRORS_CACHE, watch.listed());
    watch
}

use std::time::Duration;

use kruise_core::imagepull::nodeimage::DEFAULT_CREATION_DELAY;
use kruise_core::imagepull::secrets::DEFAULT_CONFIG_NAMESPACE;

/// What an operator may set (OpenKruise's flags and environment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// How long a node is Ready before its NodeImage is made
    /// (`--nodeimage-creation-delay`).
    pub creation_delay: Duration,
    /// Where pull secrets are mirrored for the agents
    /// (`KRUISE_DAEMON_CONFIG_NS`).
    pub config_namespace: String,
    /// Extra TTL of an Always job's tags, in seconds
    /// (`--default-ttlseconds-for-always-nodeimage`).
    pub extra_always_ttl: i32,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            creation_delay: DEFAULT_CREATION_DELAY,
            config_namespace: DEFAULT_CONFIG_NAMESPACE.to_owned(),
            extra_always_ttl: 0,
        }
    }
}

/// A read or write the round could not do; retried with backoff.
pub use kruise_controller_runtime::api_error::ApiFailure as Error;
use kruise_controller_runtime::api_error::failed;
