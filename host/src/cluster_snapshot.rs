//! Evaluations of a cluster-reading policy from a snapshot of its cluster
//! reads. A module annotated `io.kruise-wasm/snapshot-after-read-cluster`
//! (the sidecarset policy) keeps, in its `read_cluster` operation, what it
//! read from the cluster with the answer it read it from; a snapshot taken
//! after that operation starts every evaluation with the SidecarSets read
//! and prepared. The guest still lists them on every request and uses what
//! it kept only while the answer is the same text, so a stale snapshot
//! costs a read, never a wrong answer.
//!
//! Taking a snapshot compiles the module again (seconds of CPU), so it is
//! taken again only when the reads it made answer otherwise and have gone
//! on answering the same for a while ([`Timing`]): under pod churn the
//! SidecarSet controller rewrites the status (and so the list) every few
//! seconds, and those requests read the list as they would without it.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};

use crate::capabilities::KUBERNETES_READS;
use crate::metadata::READ_CLUSTER;
use crate::policy::Policy;
use crate::runtime::{CompiledModule, Digest, HostCalls, Limits, Runtime};

/// How a policy's cluster snapshot is taken: the module's bytes and the
/// runtime to compile them with, and the reads the snapshot in use holds.
pub struct ClusterSnapshot {
    runtime: Runtime,
    wasm: Arc<[u8]>,
    held: Mutex<Option<HeldReads>>,
}

impl std::fmt::Debug for ClusterSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterSnapshot").finish_non_exhaustive()
    }
}

/// What a policy's cluster snapshot holds, as [`ClusterSnapshot::observe`]
/// finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observation {
    /// None taken yet.
    NotTaken,
    /// Its reads answer as they did when it was taken.
    Fresh,
    /// They answer otherwise now: the digest of today's answers.
    Stale(Digest),
}

impl ClusterSnapshot {
    pub fn new(runtime: &Runtime, wasm: &[u8]) -> Self {
        Self {
            runtime: runtime.clone(),
            wasm: wasm.into(),
            held: Mutex::default(),
        }
    }

    /// Runs `read_cluster` with `settings` in a fresh instance whose host
    /// calls `host` answers, and returns the module that starts where it
    /// left off. Refused when the run made a host call other than a
    /// Kubernetes read, whose answer could not be checked again.
    pub fn take(
        &self,
        settings: &[u8],
        limits: Limits,
        host: &Arc<dyn HostCalls>,
    ) -> Result<Arc<CompiledModule>, String> {
        let recorder = Arc::new(Recorder {
            inner: Arc::clone(host),
            reads: Mutex::default(),
        });
        let module = self
            .runtime
            .snapshot(
                &self.wasm,
                READ_CLUSTER,
                settings,
                limits,
                Arc::clone(&recorder) as Arc<dyn HostCalls>,
            )
            .map_err(|e| e.to_string())?;
        let reads = std::mem::take(&mut *lock(&recorder.reads));
        let reads = reads.into_iter().collect::<Result<Vec<_>, _>>()?;
        *lock(&self.held) = Some(HeldReads::new(reads));
        Ok(module)
    }

    /// Whether the snapshot in use is as fresh as `host` answers now.
    pub fn observe(&self, host: &dyn HostCalls) -> Observation {
        match &*lock(&self.held) {
            None => Observation::NotTaken,
            Some(held) => {
                let now = held.answers_now(host);
                if now == held.answers {
                    Observation::Fresh
                } else {
                    Observation::Stale(now)
                }
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One Kubernetes read a snapshot's run made, and its answer then.
#[derive(Debug, Clone)]
struct Read {
    operation: String,
    payload: Vec<u8>,
    answer: Result<Vec<u8>, String>,
}

/// The reads of one snapshot's run, in order, and the digest of their
/// answers then.
#[derive(Debug)]
struct HeldReads {
    reads: Vec<Read>,
    answers: Digest,
}

impl HeldReads {
    fn new(reads: Vec<Read>) -> Self {
        let answers = digest(reads.iter().map(|read| &read.answer));
        Self { reads, answers }
    }

    fn answers_now(&self, host: &dyn HostCalls) -> Digest {
        let now: Vec<_> = self
            .reads
            .iter()
            .map(|read| host.host_call(KUBEWARDEN, KUBERNETES, &read.operation, &read.payload))
            .collect();
        digest(now.iter())
    }
}

/// One digest of a sequence of answers, each told apart from the next
/// and errors from answers.
fn digest<'a>(answers: impl Iterator<Item = &'a Result<Vec<u8>, String>>) -> Digest {
    let mut hasher = Sha256::new();
    for answer in answers {
        let (tag, bytes) = match answer {
            Ok(bytes) => (b'o', bytes.as_slice()),
            Err(message) => (b'e', message.as_bytes()),
        };
        hasher.update([tag]);
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    }
    hasher.finalize().into()
}

const KUBEWARDEN: &str = "kubewarden";
const KUBERNETES: &str = "kubernetes";

/// The host calls of a snapshot's run, answered by `inner`; each read is
/// recorded with its answer, any other call (but a log line) as an error.
struct Recorder {
    inner: Arc<dyn HostCalls>,
    reads: Mutex<Vec<Result<Read, String>>>,
}

impl HostCalls for Recorder {
    fn host_call(
        &self,
        binding: &str,
        namespace: &str,
        operation: &str,
        payload: &[u8],
    ) -> Result<Vec<u8>, String> {
        let answer = self.inner.host_call(binding, namespace, operation, payload);
        let is_read = binding == KUBEWARDEN
            && namespace == KUBERNETES
            && KUBERNETES_READS.contains(&operation);
        if is_read {
            lock(&self.reads).push(Ok(Read {
                operation: operation.to_owned(),
                payload: payload.to_vec(),
                answer: answer.clone(),
            }));
        } else if namespace != "tracing" {
            lock(&self.reads).push(Err(format!(
                "{READ_CLUSTER} made the host call {binding}/{namespace}/{operation}, \
                 which a snapshot cannot hold"
            )));
        }
        answer
    }

    fn console_log(&self, message: &str) {
        self.inner.console_log(message);
    }
}

/// When a stale snapshot is taken again.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// How often the reads are asked again.
    pub check_every: Duration,
    /// How long they must have answered the same before a new snapshot.
    pub settle: Duration,
    /// The least time between two snapshots of a policy.
    pub min_interval: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            check_every: Duration::from_secs(2),
            settle: Duration::from_secs(10),
            min_interval: Duration::from_secs(30),
        }
    }
}

/// The decision of when to take a snapshot, over what was observed.
#[derive(Debug, Default)]
struct Refresh {
    /// Stale answers seen, and since when they have answered the same.
    stale: Option<(Digest, Instant)>,
    last_taken: Option<Instant>,
}

impl Refresh {
    /// Whether to take a snapshot now. The first is taken as soon as the
    /// policy's caches have filled (`ready`); later ones once the answers
    /// have settled, and never within `min_interval` of the last.
    fn take_now(
        &mut self,
        observation: Observation,
        ready: bool,
        now: Instant,
        timing: &Timing,
    ) -> bool {
        let rested = self
            .last_taken
            .is_none_or(|last| now.duration_since(last) >= timing.min_interval);
        match observation {
            Observation::NotTaken => ready && rested,
            Observation::Fresh => {
                self.stale = None;
                false
            }
            Observation::Stale(answers) => {
                let since = match self.stale {
                    Some((seen, since)) if seen == answers => since,
                    _ => self.stale.insert((answers, now)).1,
                };
                now.duration_since(since) >= timing.settle && rested
            }
        }
    }

    fn taken(&mut self, now: Instant) {
        self.last_taken = Some(now);
        self.stale = None;
    }
}

/// Keeps the cluster snapshot of `policy` fresh from a thread of its own,
/// until the policy is dropped. Does nothing for a policy without one. A
/// snapshot that cannot be taken is logged and tried again (no sooner than
/// `min_interval`); meanwhile the policy evaluates from the module it has.
pub fn keep_fresh(policy: &Arc<Policy>, timing: Timing) -> std::io::Result<()> {
    if !policy.takes_cluster_snapshots() {
        return Ok(());
    }
    let weak = Arc::downgrade(policy);
    std::thread::Builder::new()
        .name(format!("snapshot-{}", policy.id))
        .spawn(move || refresh_loop(&weak, timing))
        .map(drop)
}

/// What the refresh thread asks of a policy.
trait Snapshotted {
    fn id(&self) -> &str;
    /// `None` once the policy takes no cluster snapshots.
    fn observe(&self) -> Option<(Observation, bool)>;
    fn take(&self) -> Result<(), String>;
}

impl Snapshotted for Policy {
    fn id(&self) -> &str {
        &self.id
    }

    fn observe(&self) -> Option<(Observation, bool)> {
        self.observe_cluster_snapshot()
    }

    fn take(&self) -> Result<(), String> {
        self.take_cluster_snapshot()
    }
}

fn refresh_loop<P: Snapshotted>(weak: &Weak<P>, timing: Timing) {
    let mut refresh = Refresh::default();
    loop {
        std::thread::sleep(timing.check_every);
        let Some(policy) = weak.upgrade() else {
            return;
        };
        let Some((observation, ready)) = policy.observe() else {
            return;
        };
        let now = Instant::now();
        if !refresh.take_now(observation, ready, now, &timing) {
            continue;
        }
        // A failed take counts as taken, so the next try waits for
        // `min_interval` too.
        refresh.taken(now);
        match policy.take() {
            Ok(()) => tracing::info!(
                policy = policy.id(),
                "evaluations start from a new cluster snapshot"
            ),
            Err(error) => tracing::warn!(
                policy = policy.id(),
                %error,
                retry_after = ?timing.min_interval,
                "cannot take a cluster snapshot: evaluations go on from the module they \
                 started from (a stale snapshot costs a read per request, not a wrong answer)"
            ),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::{HeldReads, Observation, Recorder, Refresh, Snapshotted, Timing, refresh_loop};
    use crate::runtime::HostCalls;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    /// Answers each call with its operation and payload, and a counter
    /// that only `bump` moves.
    struct Echo(Mutex<u8>);

    impl HostCalls for Echo {
        fn host_call(
            &self,
            _: &str,
            _: &str,
            operation: &str,
            payload: &[u8],
        ) -> Result<Vec<u8>, String> {
            if operation == "get_resource" {
                return Err("not found".to_owned());
            }
            let mut answer = [operation.as_bytes(), payload].concat();
            answer.push(
                *self
                    .0
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            Ok(answer)
        }
    }

    fn recording(inner: &Arc<Echo>) -> Recorder {
        Recorder {
            inner: Arc::clone(inner) as Arc<dyn HostCalls>,
            reads: Mutex::default(),
        }
    }

    /// Reads are recorded with their answers (a failed read too) and asked
    /// again to tell fresh from stale; log lines pass; anything else is
    /// noted as a call a snapshot cannot hold.
    #[test]
    fn the_reads_of_a_run_are_recorded_and_asked_again() {
        let echo = Arc::new(Echo(Mutex::new(0)));
        let recorder = recording(&echo);
        let list = recorder.host_call("kubewarden", "kubernetes", "list_resources_all", b"{}");
        assert_eq!(list, Ok(b"list_resources_all{}\0".to_vec()));
        let get = recorder.host_call("kubewarden", "kubernetes", "get_resource", b"{}");
        assert!(get.is_err());
        assert!(
            recorder
                .host_call("kubewarden", "tracing", "log", b"hi")
                .is_ok()
        );
        let reads: Vec<_> = std::mem::take(&mut *recorder.reads.lock().unwrap());
        let held = HeldReads::new(reads.into_iter().collect::<Result<_, _>>().unwrap());
        assert_eq!(held.reads.len(), 2);
        assert_eq!(held.answers_now(&*echo), held.answers);
        *echo.0.lock().unwrap() = 1;
        assert_ne!(held.answers_now(&*echo), held.answers);

        let recorder = recording(&echo);
        let _ = recorder.host_call("kubewarden", "kubernetes", "can_i", b"{}");
        let reads = std::mem::take(&mut *recorder.reads.lock().unwrap());
        let refused = reads
            .into_iter()
            .collect::<Result<Vec<_>, _>>()
            .unwrap_err();
        assert_eq!(
            refused,
            "read_cluster made the host call kubewarden/kubernetes/can_i, which a snapshot cannot hold"
        );
    }

    /// A policy whose first snapshot cannot be taken (its reads failed,
    /// say) and whose second can.
    #[derive(Default)]
    struct FailsOnce {
        takes: Mutex<u32>,
    }

    impl Snapshotted for FailsOnce {
        fn id(&self) -> &'static str {
            "fails-once"
        }

        fn observe(&self) -> Option<(Observation, bool)> {
            let taken = *self.takes.lock().unwrap() >= 2;
            Some((
                if taken {
                    Observation::Fresh
                } else {
                    Observation::NotTaken
                },
                true,
            ))
        }

        fn take(&self) -> Result<(), String> {
            let mut takes = self.takes.lock().unwrap();
            *takes += 1;
            if *takes == 1 {
                Err("the API server is away".to_owned())
            } else {
                Ok(())
            }
        }
    }

    #[test]
    fn a_snapshot_that_could_not_be_taken_is_tried_again() {
        let policy = Arc::new(FailsOnce::default());
        let weak = Arc::downgrade(&policy);
        let timing = Timing {
            check_every: Duration::from_millis(1),
            settle: Duration::ZERO,
            min_interval: Duration::from_millis(20),
        };
        let thread = std::thread::spawn(move || refresh_loop(&weak, timing));
        let deadline = Instant::now() + Duration::from_secs(30);
        while *policy.takes.lock().unwrap() < 2 {
            assert!(Instant::now() < deadline, "not tried again");
            std::thread::sleep(Duration::from_millis(5));
        }
        // Fresh now: no third take; the loop ends with the policy.
        drop(policy);
        thread.join().unwrap();
    }

    fn at(start: Instant, seconds: u64) -> Instant {
        start + Duration::from_secs(seconds)
    }

    #[test]
    fn the_first_snapshot_waits_only_for_the_caches() {
        let timing = Timing::default();
        let start = Instant::now();
        let mut refresh = Refresh::default();
        assert!(!refresh.take_now(Observation::NotTaken, false, start, &timing));
        assert!(refresh.take_now(Observation::NotTaken, true, at(start, 2), &timing));
    }

    #[test]
    fn a_stale_snapshot_is_taken_again_once_the_answers_settle() {
        let timing = Timing::default();
        let start = Instant::now();
        let mut refresh = Refresh::default();
        refresh.taken(start);
        assert!(!refresh.take_now(Observation::Fresh, true, at(start, 40), &timing));
        // Answers that keep changing (pod churn) never settle.
        for (second, answers) in [(42, [1; 32]), (50, [2; 32]), (58, [3; 32]), (66, [4; 32])] {
            let stale = Observation::Stale(answers);
            assert!(!refresh.take_now(stale, true, at(start, second), &timing));
        }
        // The same answers for `settle`: taken.
        let settled = Observation::Stale([4; 32]);
        assert!(!refresh.take_now(settled, true, at(start, 75), &timing));
        assert!(refresh.take_now(settled, true, at(start, 76), &timing));
    }

    #[test]
    fn snapshots_are_at_least_min_interval_apart() {
        let timing = Timing::default();
        let start = Instant::now();
        let mut refresh = Refresh::default();
        refresh.taken(start);
        let stale = Observation::Stale([1; 32]);
        assert!(!refresh.take_now(stale, true, at(start, 1), &timing));
        assert!(!refresh.take_now(stale, true, at(start, 29), &timing));
        assert!(refresh.take_now(stale, true, at(start, 30), &timing));
    }

    #[test]
    fn answers_back_to_what_the_snapshot_holds_stop_the_countdown() {
        let timing = Timing::default();
        let start = Instant::now();
        let mut refresh = Refresh::default();
        let stale = Observation::Stale([1; 32]);
        assert!(!refresh.take_now(stale, true, start, &timing));
        assert!(!refresh.take_now(Observation::Fresh, true, at(start, 5), &timing));
        // Stale again: the settle time counts from now.
        assert!(!refresh.take_now(stale, true, at(start, 12), &timing));
        assert!(refresh.take_now(stale, true, at(start, 22), &timing));
    }
}
