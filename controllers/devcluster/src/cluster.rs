//! Starting and stopping the control plane.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde_json::json;

use crate::binaries::{Binaries, BuildError};
use crate::crds::ConversionWebhook;
use crate::pki::Pki;
use crate::ports::free_ports;
use crate::process::Component;

/// How long the control plane may take to serve and to create the
/// `default` ServiceAccount (seconds on this hardware; CI machines are
/// shared and slower).
const READY_DEADLINE: Duration = Duration::from_mins(3);

#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Where the keys, kubeconfig, etcd data and logs go. `None`: a fresh
    /// temporary directory, removed when the cluster stops.
    pub work_dir: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error("dev cluster set-up: {0}")]
    Setup(String),
    #[error("{0}")]
    Component(String),
    #[error(
        "the control plane was not ready within {seconds} s; last error: {last}; logs in {logs}"
    )]
    NotReady {
        seconds: u64,
        last: String,
        logs: String,
    },
}

/// Whether a component could not listen on its port (someone took it
/// between [`free_ports`] and the bind).
fn lost_a_port(error: &StartError) -> bool {
    !matches!(error, StartError::Build(_)) && error.to_string().contains("address already in use")
}

/// A running dev cluster. Stops its processes when dropped.
pub struct DevCluster {
    pub work_dir: PathBuf,
    pub kubeconfig: PathBuf,
    pub server: String,
    pub pki: Pki,
    pub binaries: Binaries,
    client: Client,
    components: Vec<Component>,
    remove_work_dir: bool,
}

/// How many times a start-up that lost one of its freshly picked ports to
/// another process (tests start clusters in parallel) is tried, each time
/// on new ports.
const START_ATTEMPTS: usize = 3;

impl DevCluster {
    pub async fn start(options: Options) -> Result<Self, StartError> {
        let mut attempt = 1;
        loop {
            match Self::start_once(options.clone()).await {
                Err(error)
                    if attempt < START_ATTEMPTS
                        && options.work_dir.is_none()
                        && lost_a_port(&error) =>
                {
                    // The failed attempt's processes and directory went
                    // with it (dropped).
                    tracing::warn!(%error, "a port was taken meanwhile: starting on new ports");
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    async fn start_once(options: Options) -> Result<Self, StartError> {
        let binaries = tokio::task::spawn_blocking(Binaries::ensure)
            .await
            .map_err(|e| StartError::Setup(format!("the build task failed: {e}")))??;
        let (work_dir, remove_work_dir) = match options.work_dir {
            Some(dir) => (dir, false),
            None => (fresh_temp_dir(), true),
        };
        let setup = |what: &str, path: &Path| {
            let what = format!("{what} {}", path.display());
            move |e: std::io::Error| StartError::Setup(format!("{what}: {e}"))
        };
        std::fs::create_dir_all(&work_dir).map_err(setup("cannot create", &work_dir))?;
        let pki = Pki::generate(&work_dir).map_err(StartError::Setup)?;
        let ports = free_ports(5).map_err(|e| StartError::Setup(format!("no free ports: {e}")))?;
        let [
            etcd_client,
            etcd_peer,
            apiserver,
            controller_manager,
            scheduler,
        ] = ports[..]
        else {
            return Err(StartError::Setup("no free ports".to_owned()));
        };
        let server = format!("https://127.0.0.1:{apiserver}");
        let kubeconfig = work_dir.join("kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_yaml(&server, &pki))
            .map_err(setup("cannot write", &kubeconfig))?;

        let mut cluster = Self {
            client: client_from(&kubeconfig).await?,
            work_dir,
            kubeconfig,
            server,
            pki,
            binaries,
            components: Vec::new(),
            remove_work_dir,
        };
        let etcd_url = format!("http://127.0.0.1:{etcd_client}");
        let etcd_data = cluster.work_dir.join("etcd");
        cluster.spawn(
            "etcd",
            &[
                format!("--data-dir={}", etcd_data.display()),
                format!("--listen-client-url={etcd_url}"),
                format!("--listen-peer-url=http://127.0.0.1:{etcd_peer}"),
            ],
        )?;
        let apiserver_args = cluster.apiserver_args(&etcd_url, apiserver);
        cluster.spawn("kube-apiserver", &apiserver_args)?;
        // kube-controller-manager exits when it cannot read this ConfigMap
        // at start: on a busy machine it can come up before the API server.
        cluster.wait_serving().await?;
        let kubeconfig = cluster.kubeconfig.display().to_string();
        let client_flags = |port: u16| {
            vec![
                format!("--kubeconfig={kubeconfig}"),
                format!("--authentication-kubeconfig={kubeconfig}"),
                format!("--authorization-kubeconfig={kubeconfig}"),
                "--leader-elect=false".to_owned(),
                "--bind-address=127.0.0.1".to_owned(),
                format!("--secure-port={port}"),
            ]
        };
        let mut controller_manager_args = client_flags(controller_manager);
        controller_manager_args.extend([
            format!(
                "--service-account-private-key-file={}",
                cluster.pki.service_account_key.display()
            ),
            format!("--root-ca-file={}", cluster.pki.ca_file.display()),
            "--use-service-account-credentials=false".to_owned(),
        ]);
        cluster.spawn("kube-controller-manager", &controller_manager_args)?;
        cluster.spawn("kube-scheduler", &client_flags(scheduler))?;
        cluster.wait_ready().await?;
        tracing::info!(server = %cluster.server, kubeconfig = %cluster.kubeconfig.display(), "dev cluster ready");
        Ok(cluster)
    }

    /// A client with the cluster's admin credentials.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// A serving certificate for `127.0.0.1` signed by the cluster's CA,
    /// written as `tls.crt` and `tls.key` under `<work dir>/<name>`: what a
    /// webhook server the API server calls needs.
    pub fn write_serving_files(&self, name: &str) -> Result<(PathBuf, PathBuf), String> {
        let dir = self.work_dir.join(name);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let serving = self.pki.issue_serving(&["127.0.0.1", "localhost"])?;
        let write = |file: &str, text: &str| {
            let path = dir.join(file);
            std::fs::write(&path, text)
                .map(|()| path.clone())
                .map_err(|e| format!("cannot write {}: {e}", path.display()))
        };
        Ok((
            write("tls.crt", &serving.cert_pem)?,
            write("tls.key", &serving.key_pem)?,
        ))
    }

    /// The conversion webhook of a host serving TLS (with
    /// [`Self::write_serving_files`]) at `address`.
    pub fn conversion_webhook(&self, address: std::net::SocketAddr) -> ConversionWebhook {
        ConversionWebhook {
            url: format!("https://{address}{}", kruise_api::crd::CONVERSION_PATH),
            ca_pem: self.pki.ca_pem.clone(),
        }
    }

    /// The process ids of the control plane, in start order.
    pub fn pids(&self) -> Vec<(&'static str, u32)> {
        self.components.iter().map(|c| (c.name, c.pid())).collect()
    }

    /// Stops the processes in reverse start order and removes the work
    /// directory if the cluster made it.
    pub fn stop(&mut self) {
        while let Some(mut component) = self.components.pop() {
            component.stop();
        }
        if self.remove_work_dir {
            let _ = std::fs::remove_dir_all(&self.work_dir);
            self.remove_work_dir = false;
        }
    }

    fn spawn(&mut self, name: &'static str, args: &[String]) -> Result<(), StartError> {
        let program = self.binaries.path(name);
        let component = Component::spawn(name, &program, args, &self.work_dir)
            .map_err(|e| StartError::Component(format!("cannot start {name}: {e}")))?;
        self.components.push(component);
        Ok(())
    }

    fn apiserver_args(&self, etcd_url: &str, port: u16) -> Vec<String> {
        let pki = &self.pki;
        let path = |p: &Path| p.display().to_string();
        vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".to_owned(),
            "--advertise-address=127.0.0.1".to_owned(),
            // The `kubernetes` Service's endpoints may not be loopback.
            "--endpoint-reconciler-type=none".to_owned(),
            format!("--secure-port={port}"),
            format!("--tls-cert-file={}", path(&pki.apiserver_cert)),
            format!("--tls-private-key-file={}", path(&pki.apiserver_key)),
            format!("--client-ca-file={}", path(&pki.ca_file)),
            format!("--token-auth-file={}", path(&pki.token_file)),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_owned(),
            format!(
                "--service-account-key-file={}",
                path(&pki.service_account_public_key)
            ),
            format!(
                "--service-account-signing-key-file={}",
                path(&pki.service_account_key)
            ),
            "--service-cluster-ip-range=10.0.0.0/24".to_owned(),
            // No kube-proxy here: webhook and conversion calls to a Service
            // go straight to one of its endpoints (the install's host pod).
            "--enable-aggregator-routing=true".to_owned(),
            "--authorization-mode=Node,RBAC".to_owned(),
            // The real node's pods need hostNetwork (no pod network here).
            "--allow-privileged=true".to_owned(),
            // One client and two cores: fairness queues only cost CPU.
            "--enable-priority-and-fairness=false".to_owned(),
            "--profiling=false".to_owned(),
        ]
    }

    /// Waits until the API server serves and has published the
    /// `extension-apiserver-authentication` ConfigMap its clients read.
    async fn wait_serving(&mut self) -> Result<(), StartError> {
        let config_maps: Api<ConfigMap> = Api::namespaced(self.client.clone(), "kube-system");
        let name = "extension-apiserver-authentication";
        self.wait_until_exists(&config_maps, name, Duration::from_millis(100))
            .await
    }

    /// Ready means: the API answers and the controller-manager has made the
    /// `default` ServiceAccount that pods need.
    async fn wait_ready(&mut self) -> Result<(), StartError> {
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), "default");
        self.wait_until_exists(&accounts, "default", Duration::from_millis(250))
            .await
    }

    /// Polls for the object every `interval` while watching the components:
    /// a component that exits, or the object still missing after
    /// READY_DEADLINE, is the error.
    async fn wait_until_exists<K>(
        &mut self,
        api: &Api<K>,
        name: &str,
        interval: Duration,
    ) -> Result<(), StartError>
    where
        K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let started = Instant::now();
        let mut last = String::from("not asked yet");
        while started.elapsed() < READY_DEADLINE {
            for component in &mut self.components {
                if let Some(message) = component.exited() {
                    return Err(StartError::Component(message));
                }
            }
            match api.get_opt(name).await {
                Ok(Some(_)) => return Ok(()),
                Ok(None) => last = format!("no {} {name} yet", K::kind(&())),
                Err(error) => last = error.to_string(),
            }
            tokio::time::sleep(interval).await;
        }
        Err(StartError::NotReady {
            seconds: READY_DEADLINE.as_secs(),
            last,
            logs: self.work_dir.display().to_string(),
        })
    }
}

impl std::fmt::Debug for DevCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevCluster")
            .field("server", &self.server)
            .field("kubeconfig", &self.kubeconfig)
            .field("pids", &self.pids())
            .finish_non_exhaustive()
    }
}

impl Drop for DevCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn client_from(kubeconfig: &Path) -> Result<Client, StartError> {
    let setup = |e: &dyn std::fmt::Display| StartError::Setup(format!("kubeconfig: {e}"));
    let kubeconfig = Kubeconfig::read_from(kubeconfig).map_err(|e| setup(&e))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| setup(&e))?;
    Client::try_from(config).map_err(|e| setup(&e))
}

fn kubeconfig_yaml(server: &str, pki: &Pki) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(&pki.ca_pem);
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "devcluster", "cluster": {"server": server, "certificate-authority-data": ca}}],
        "users": [{"name": "admin", "user": {"token": pki.admin_token}}],
        "contexts": [{"name": "devcluster", "context": {"cluster": "devcluster", "user": "admin"}}],
        "current-context": "devcluster",
    });
    serde_yaml::to_string(&config).unwrap_or_default()
}

fn fresh_temp_dir() -> PathBuf {
    static COUNT: AtomicU32 = AtomicU32::new(0);
    std::env::temp_dir().join(format!(
        "kruise-devcluster-{}-{}",
        std::process::id(),
        COUNT.fetch_add(1, Ordering::Relaxed)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_lost_port_starts_the_cluster_again() {
        let lost = StartError::Component(
            "kube-scheduler exited early (exit status: 1); the end of kube-scheduler.log: \
             failed to listen on 127.0.0.1:35619: bind: address already in use"
                .to_owned(),
        );
        assert!(lost_a_port(&lost));
        let other = StartError::Component("kube-apiserver exited early: bad flag".to_owned());
        assert!(!lost_a_port(&other));
        assert!(!lost_a_port(&StartError::Setup("no free ports".to_owned())));
    }
}
