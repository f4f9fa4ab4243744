//! The agent's image puller for one node: it follows the node's NodeImage,
//! runs one worker per tag still to pull ([`puller::tasks`]), at most
//! [`MAX_PARALLEL_PULLS`] pulling at once, and writes the workers' reports
//! into the NodeImage's status ([`puller::merge`]) no more than once a
//! [`STATUS_EVERY`], and only when something changed.
//!
//! A worker tries each credential its pull secrets hold for the image's
//! registry, then anonymously, `backoffLimit + 1` times with growing
//! pauses, each try cut to its timeout and the task's deadline. A tag
//! removed from the spec, or given a new version, stops its worker.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kruise_api::nodeimage::{ImagePullPolicy, NodeImage};
use kruise_controller_runtime::api_error::{is_conflict, is_not_found};
use kruise_controller_runtime::events::Events;
use kruise_core::imagepull::nodeimage::MESSAGE_DEADLINE;
use kruise_core::imagepull::puller::{self, PullTask, Report};
use kruise_core::imagepull::reference;
use kruise_core::imagepull::secrets::{Credential, credentials_for};
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::runtime::{ContainerRuntime, RuntimeError};

/// The reporting component of the puller's events.
pub const PULLER_NAME: &str = "kruise-node-agent-imagepuller";
/// Pulls running at once on one node; the others wait (phase Waiting).
pub const MAX_PARALLEL_PULLS: usize = 2;
/// The least time between two status writes.
pub const STATUS_EVERY: Duration = Duration::from_secs(1);
/// How often the NodeImage is read again when no event came.
const IDLE_RESYNC: Duration = Duration::from_secs(30);

struct Worker {
    version: i64,
    report: Arc<Mutex<Report>>,
    task: JoinHandle<()>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Puller<R> {
    client: Client,
    node: String,
    runtime: R,
    events: Events,
    slots: Arc<Semaphore>,
    workers: HashMap<(String, String), Worker>,
}

/// Runs the puller for `node` until the task is dropped.
pub async fn run<R: ContainerRuntime>(client: Client, node: String, runtime: R) {
    let mut puller = Puller {
        events: Events::new(client.clone(), PULLER_NAME),
        slots: Arc::new(Semaphore::new(MAX_PARALLEL_PULLS)),
        workers: HashMap::new(),
        client: client.clone(),
        node: node.clone(),
        runtime,
    };
    tracing::info!(component = PULLER_NAME, %node, "starting");
    let own = watcher::Config::default().fields(&format!("metadata.name={node}"));
    // Backed off: a watch that fails (the API server restarting, RBAC
    // refusing it) would otherwise list again at once, and the loop below
    // with it, on every node.
    let mut events = watcher::watcher(Api::<NodeImage>::all(client), own)
        .default_backoff()
        .boxed();
    loop {
        let pause = match puller.round().await {
            Ok(pause) => pause,
            Err(error) => {
                tracing::warn!(%node, %error, "image puller round failed");
                Duration::from_secs(5)
            }
        };
        // Wake on a change of the NodeImage, or after the pause.
        tokio::select! {
            _ = events.next() => {}
            () = tokio::time::sleep(pause) => {}
        }
    }
}

impl<R: ContainerRuntime> Puller<R> {
    /// Reads the NodeImage, starts and stops workers, writes the status;
    /// returns how soon to look again.
    async fn round(&mut self) -> Result<Duration, kube::Error> {
        let api: Api<NodeImage> = Api::all(self.client.clone());
        let Some(node_image) = api.get_opt(&self.node).await? else {
            self.workers.clear();
            return Ok(IDLE_RESYNC);
        };
        let tasks = puller::tasks(&node_image);
        self.workers.retain(|key, worker| {
            tasks
                .iter()
                .any(|t| t.key() == *key && t.version == worker.version)
        });
        for task in tasks {
            if !self.workers.contains_key(&task.key()) {
                self.start(&node_image, task);
            }
        }
        let reports: Vec<Report> = self
            .workers
            .values()
            .map(|w| lock(&w.report).clone())
            .collect();
        if let Some(status) = puller::merge(&node_image, &reports) {
            let mut updated = node_image;
            updated.status = Some(status);
            match write_status(&api, &updated).await {
                Ok(()) => {}
                // The manager's watchdog wrote first: merge again next round.
                Err(error) if is_conflict(&error) || is_not_found(&error) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(if self.workers.is_empty() {
            IDLE_RESYNC
        } else {
            STATUS_EVERY
        })
    }

    fn start(&mut self, node_image: &NodeImage, task: PullTask) {
        let report = Arc::new(Mutex::new(Report::waiting(&task)));
        let pull = Pull {
            client: self.client.clone(),
            runtime: self.runtime.clone(),
            events: self.events.clone(),
            on: node_image.object_ref(&()),
            report: report.clone(),
            slots: self.slots.clone(),
        };
        let version = task.version;
        let key = task.key();
        tracing::info!(node = %self.node, image = %task.reference(), version, "pull task");
        let handle = tokio::spawn(pull.run(task));
        self.workers.insert(
            key,
            Worker {
                version,
                report,
                task: handle,
            },
        );
    }
}

/// A whole status replace on the version it was read at: the status maps
/// lose entries, which a merge patch cannot say.
async fn write_status(api: &Api<NodeImage>, node_image: &NodeImage) -> Result<(), kube::Error> {
    let name = node_image.metadata.name.clone().unwrap_or_default();
    api.replace_status(&name, &PostParams::default(), node_image)
        .await
        .map(drop)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One worker: the pull of one tag at one version.
struct Pull<R> {
    client: Client,
    runtime: R,
    events: Events,
    on: k8s_openapi::api::core::v1::ObjectReference,
    report: Arc<Mutex<Report>>,
    slots: Arc<Semaphore>,
}

impl<R: ContainerRuntime> Pull<R> {
    async fn run(self, task: PullTask) {
        let Ok(_slot) = self.slots.clone().acquire_owned().await else {
            return;
        };
        let pulling = Report::pulling(&task, Timestamp::now());
        *lock(&self.report) = pulling.clone();
        let reference = task.reference();
        let outcome = self.pull(&task, &reference).await;
        let done = match outcome {
            Ok(id) => {
                let note = format!("Image {reference} pulled ({id})");
                self.events
                    .normal(&self.on, "PullImageSucceed", "PullImage", &note)
                    .await;
                pulling.succeeded(&id, Timestamp::now())
            }
            Err(message) => {
                let note = format!("Image {reference} failed to pull: {message}");
                tracing::warn!(image = %reference, %message, "pull failed");
                self.events
                    .warning(&self.on, "PullImageFailed", "PullImage", &note)
                    .await;
                pulling.failed(&message, Timestamp::now())
            }
        };
        *lock(&self.report) = done;
    }

    /// The image's ID once pulled (or found, for IfNotPresent), or the
    /// last error.
    async fn pull(&self, task: &PullTask, reference: &str) -> Result<String, String> {
        if task.image_pull_policy == ImagePullPolicy::IfNotPresent
            && let Ok(Some(id)) = self.runtime.image_id(reference).await
        {
            return Ok(id);
        }
        let credentials = self.credentials(task).await;
        let started = Instant::now();
        let mut last_error = String::from("no attempt made");
        for attempt in 0..task.limits.attempts {
            if attempt > 0 {
                tokio::time::sleep(puller::retry_delay(attempt - 1)).await;
            }
            let Some(timeout) = puller::attempt_timeout(&task.limits, started.elapsed()) else {
                return Err(MESSAGE_DEADLINE.to_owned());
            };
            match self.try_once(task, reference, &credentials, timeout).await {
                Ok(id) => return Ok(id),
                Err(error) => last_error = error,
            }
        }
        Err(last_error)
    }

    /// One attempt: each credential in turn, then anonymously, all within
    /// the attempt's `timeout` (spec: each attempt has `timeoutSeconds`;
    /// one per credential would stretch an attempt, and the task's
    /// deadline, by the number of pull secrets).
    async fn try_once(
        &self,
        task: &PullTask,
        reference: &str,
        credentials: &[Credential],
        timeout: Duration,
    ) -> Result<String, String> {
        let sandbox = task.sandbox_config.as_ref();
        let ends = tokio::time::Instant::now() + timeout;
        let mut errors = Vec::new();
        let tries = credentials.iter().map(Some).chain([None]);
        for credential in tries {
            let pull = self.runtime.pull_image(reference, credential, sandbox);
            match tokio::time::timeout_at(ends, pull).await {
                Ok(Ok(id)) => return Ok(id),
                Ok(Err(error)) => errors.push(describe(&error, credential)),
                Err(_) => {
                    errors.push(format!("no result within {} s", timeout.as_secs()));
                    break;
                }
            }
        }
        Err(errors.join("; "))
    }

    /// The credentials the task's pull secrets hold for its registry. A
    /// secret that is gone or unreadable is skipped (the pull may still
    /// work anonymously), and said in a log line.
    async fn credentials(&self, task: &PullTask) -> Vec<Credential> {
        let domain = match reference::parse(&task.reference()) {
            Ok(image) => image.domain().to_owned(),
            Err(_) => return Vec::new(),
        };
        let mut found = Vec::new();
        for secret in &task.secrets {
            let (Some(namespace), Some(name)) = (&secret.namespace, &secret.name) else {
                continue;
            };
            let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
            match api.get_opt(name).await {
                Ok(Some(secret)) => {
                    match credentials_for(&secret.data.unwrap_or_default(), &domain) {
                        Ok(credentials) => found.extend(credentials),
                        Err(why) => {
                            tracing::warn!(%namespace, %name, %why, "unreadable pull secret");
                        }
                    }
                }
                Ok(None) => tracing::warn!(%namespace, %name, "pull secret not found"),
                Err(error) => tracing::warn!(%namespace, %name, %error, "cannot read pull secret"),
            }
        }
        found
    }
}

fn describe(error: &RuntimeError, credential: Option<&Credential>) -> String {
    match credential {
        Some(c) => format!("as {}: {error}", c.username),
        None => format!("anonymously: {error}"),
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use kruise_controller_runtime::testing::FakeApi;

    use super::*;
    use crate::sim::{SimPulls, SimRuntime};

    /// Two pull secrets and a registry that hangs: the attempt ends at its
    /// timeout, once, where it used to wait that long for each credential
    /// and then anonymously (three timeouts in its message).
    #[tokio::test]
    async fn an_attempt_has_one_timeout_for_all_its_credentials() {
        let api = FakeApi::default();
        let node_image = NodeImage::default();
        let task = PullTask {
            image: "nginx".to_owned(),
            tag: "1.25".to_owned(),
            version: 0,
            limits: puller::Limits {
                timeout: Duration::from_millis(100),
                attempts: 1,
                deadline: None,
            },
            image_pull_policy: ImagePullPolicy::Always,
            secrets: Vec::new(),
            sandbox_config: None,
        };
        let pull = Pull {
            client: api.client(),
            // A registry that does not answer within the hour.
            runtime: SimRuntime::with_pulls(
                api.client(),
                "node-1",
                SimPulls {
                    delay: Duration::from_hours(1),
                    failure_rate: 0.0,
                },
            ),
            events: Events::new(api.client(), PULLER_NAME),
            on: node_image.object_ref(&()),
            report: Arc::new(Mutex::new(Report::waiting(&task))),
            slots: Arc::new(Semaphore::new(1)),
        };
        let credential = |user: &str| Credential {
            username: user.to_owned(),
            password: "secret".to_owned(),
        };
        let credentials = [credential("a"), credential("b")];
        let outcome = pull
            .try_once(&task, "nginx:1.25", &credentials, task.limits.timeout)
            .await;
        let message = outcome.expect_err("a hanging registry");
        assert_eq!(message, "no result within 0 s");
    }

    /// An API server that refuses everything gets a few requests a
    /// second from the puller, not a loop of them (without the backoff:
    /// over a thousand in these 2 s).
    #[tokio::test]
    async fn a_failing_watch_does_not_spin_the_puller() {
        let api = FakeApi::default();
        api.set_down(true);
        let runtime = SimRuntime::new(api.client(), "node-1");
        let puller = run(api.client(), "node-1".to_owned(), runtime);
        let _ = tokio::time::timeout(Duration::from_secs(2), puller).await;
        let requests = api.seen().len();
        assert!((2..=20).contains(&requests), "{requests} requests in 2 s");
    }
}
