//! Serving a policies.yml (and a chains file): loading, the cluster the
//! Kubernetes host calls read, and the server. What `kruise-wasm serve`
//! and the dev cluster's webhook host both run.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::capabilities::ContextAwareResource;
use crate::chains_file;
use crate::cluster_fixtures::{ClusterFixtures, ClusterReads};
use crate::cluster_snapshot::{self, Timing};
use crate::live_cluster::{Credentials, LiveCluster};
use crate::policies_file;
use crate::policy::load_policies_with_cluster;
use crate::runtime::Runtime;
use crate::server::{self, RunningServer, ServerConfig};

/// Where the Kubernetes host calls get their answers.
#[derive(Debug, Clone, Copy)]
pub enum ClusterSource<'a> {
    /// None: those calls fail with a clear message.
    None,
    /// A YAML list of objects.
    Fixtures(&'a Path),
    /// A live cluster, through watch caches of the kinds the policies may
    /// read. They fill once the server is up (it may be the conversion
    /// webhook of what they list); a request to a policy that reads them
    /// waits for them before it takes an evaluation slot.
    Live(Credentials<'a>),
}

#[derive(Debug, Clone, Copy)]
pub struct ServeFiles<'a> {
    pub policies: &'a Path,
    pub chains: Option<&'a Path>,
    pub always_accept_namespace: Option<&'a str>,
}

/// Loads everything (a bad policy, settings or chain stops here with a
/// message naming it) and starts serving. Returns the server and the
/// number of policies. With `cluster_snapshots`, a policy whose module
/// asks for it is evaluated from a snapshot of its cluster reads, kept
/// fresh with that timing (`cluster_snapshot`); each snapshot compiles the
/// module again, which needs memory headroom (host/README.md).
pub fn start(
    runtime: &Runtime,
    files: ServeFiles<'_>,
    cluster: ClusterSource<'_>,
    default_timeout: Option<Duration>,
    config: &ServerConfig,
    cluster_snapshots: Option<Timing>,
) -> Result<(RunningServer, usize), String> {
    let cluster = connect(files.policies, cluster)?;
    let policies =
        load_policies_with_cluster(runtime, files.policies, default_timeout, cluster.as_ref())
            .map_err(|e| e.to_string())?;
    let count = policies.len();
    let policies: BTreeMap<_, _> = policies
        .into_iter()
        .map(|(id, policy)| (id, Arc::new(policy)))
        .collect();
    if let Some(timing) = cluster_snapshots {
        for policy in policies.values() {
            cluster_snapshot::keep_fresh(policy, timing).map_err(|e| {
                format!(
                    "policy `{}`: cannot start its snapshot thread: {e}",
                    policy.id
                )
            })?;
        }
    }
    let chains = match files.chains {
        Some(path) => chains_file::parse(&read_text(path)?, &policies)
            .map_err(|e| format!("{}: {e}", path.display()))?,
        None => BTreeMap::new(),
    };
    let policies = server::api::Policies {
        policies,
        always_accept_namespace: files.always_accept_namespace.map(str::to_owned),
        chains,
    };
    Ok((server::start(policies, config)?, count))
}

fn connect(
    policies_yml: &Path,
    cluster: ClusterSource<'_>,
) -> Result<Option<Arc<dyn ClusterReads>>, String> {
    Ok(match cluster {
        ClusterSource::None => None,
        ClusterSource::Fixtures(path) => Some(Arc::new(
            ClusterFixtures::from_yaml(&read_text(path)?)
                .map_err(|e| format!("{}: {e}", path.display()))?,
        )),
        ClusterSource::Live(credentials) => {
            let kinds = context_aware_kinds(policies_yml)?;
            Some(Arc::new(LiveCluster::connect(credentials, &kinds)?))
        }
    })
}

/// Every kind some policy of the file may read.
fn context_aware_kinds(policies_yml: &Path) -> Result<Vec<ContextAwareResource>, String> {
    let entries = policies_file::parse(&read_text(policies_yml)?)
        .map_err(|e| format!("{}: {e}", policies_yml.display()))?;
    let mut kinds: Vec<ContextAwareResource> = Vec::new();
    for kind in entries
        .into_values()
        .flat_map(|e| e.context_aware_resources)
    {
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    Ok(kinds)
}

pub fn read_text(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}
