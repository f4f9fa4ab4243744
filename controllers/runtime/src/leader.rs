//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several
//! manager replicas exactly one runs the controllers and another takes over
//! within a lease duration when it dies. The decisions are [`decide`]'s;
//! this is the loop that reads and writes the Lease.
//!
//! Every write carries the resourceVersion it was decided on: two replicas
//! racing for a free Lease cannot both win (the loser gets 409 and reads
//! again).

pub mod decide;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::time::Instant;

use crate::api_error::is_conflict;
use decide::{Decision, Observation, claim, decide, released};

/// How long a Lease protects its holder, how long a leader keeps trying to
/// renew before it gives up, and how often everyone tries (client-go's
/// defaults: 15 s, 10 s, 2 s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Timing {
    /// The rules client-go enforces: a Lease says whole seconds, and a
    /// leader must give up (renew deadline) before its Lease can expire
    /// for the others, after a few tries.
    pub fn check(&self) -> Result<(), String> {
        if self.lease_duration < Duration::from_secs(1) {
            return Err("the lease duration must be at least one second".into());
        }
        if self.renew_deadline >= self.lease_duration {
            return Err("the renew deadline must be shorter than the lease duration".into());
        }
        if self.retry_period.is_zero() || self.retry_period >= self.renew_deadline {
            return Err(
                "the retry period must be positive and shorter than the renew deadline".into(),
            );
        }
        Ok(())
    }
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// One round's outcome.
#[derive(Debug, PartialEq, Eq)]
enum Round {
    Leading,
    Held(String),
    /// Someone wrote the Lease between our read and our write.
    Raced,
}

/// Why a leader stopped leading.
#[derive(Debug, thiserror::Error)]
pub enum Lost {
    #[error("the Lease is now held by {0}")]
    TakenBy(String),
    #[error("the Lease could not be renewed for {0:?}")]
    NotRenewed(Duration),
}

#[derive(Debug)]
pub struct LeaderElection {
    leases: Api<Lease>,
    name: String,
    identity: String,
    timing: Timing,
    observed: Option<Observation<Instant>>,
}

impl LeaderElection {
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: String,
        timing: Timing,
    ) -> Self {
        Self {
            leases: Api::namespaced(client, namespace),
            name: name.to_owned(),
            identity,
            timing,
            observed: None,
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Returns once this replica holds the Lease.
    pub async fn acquire(&mut self) {
        let mut waiting_on = None;
        loop {
            match self.round().await {
                Ok(Round::Leading) => {
                    tracing::info!(identity = self.identity, lease = self.name, "leading");
                    return;
                }
                Ok(Round::Held(holder)) => {
                    if waiting_on.as_ref() != Some(&holder) {
                        tracing::info!(lease = self.name, %holder, "standing by");
                        waiting_on = Some(holder);
                    }
                }
                Ok(Round::Raced) => {}
                Err(error) => {
                    tracing::warn!(lease = self.name, %error, "cannot read or take the Lease");
                }
            }
            tokio::time::sleep(self.timing.retry_period).await;
        }
    }

    /// Renews the Lease every retry period while leading; returns when
    /// leadership is lost (the caller must stop acting as leader).
    pub async fn keep(&mut self) -> Lost {
        let mut renewed = Instant::now();
        loop {
            tokio::time::sleep(self.timing.retry_period).await;
            // A round hanging on an unresponsive API server must not keep
            // us leading past the deadline (the others' lease runs out).
            let left = self.timing.renew_deadline.saturating_sub(renewed.elapsed());
            match tokio::time::timeout(left, self.round()).await {
                Ok(Ok(Round::Leading)) => renewed = Instant::now(),
                Ok(Ok(Round::Held(holder))) => return Lost::TakenBy(holder),
                Ok(Ok(Round::Raced)) | Err(_) => {}
                Ok(Err(error)) => {
                    tracing::warn!(lease = self.name, %error, "cannot renew the Lease");
                }
            }
            if renewed.elapsed() >= self.timing.renew_deadline {
                return Lost::NotRenewed(self.timing.renew_deadline);
            }
        }
    }

    /// Steps down, so a standby takes over at once rather than after the
    /// lease duration. Best effort: a failure leaves the Lease to expire.
    pub async fn release(&mut self) {
        let Ok(Some(lease)) = self.leases.get_opt(&self.name).await else {
            return;
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(&self.identity) {
            return;
        }
        let stepped_down = Lease {
            spec: Some(released(&spec, Timestamp::now())),
            ..lease
        };
        match self
            .leases
            .replace(&self.name, &PostParams::default(), &stepped_down)
            .await
        {
            Ok(_) => tracing::info!(lease = self.name, "released"),
            Err(error) => tracing::warn!(lease = self.name, %error, "cannot release the Lease"),
        }
    }

    /// Reads the Lease and, if it is ours or free, writes it as ours.
    async fn round(&mut self) -> Result<Round, kube::Error> {
        let current = self.leases.get_opt(&self.name).await?;
        let spec = current.as_ref().map(|l| l.spec.clone().unwrap_or_default());
        let now = Instant::now();
        let seen = Observation::after_reading(self.observed.take(), spec.as_ref(), now);
        let decision = decide(spec.as_ref(), &self.identity, now - seen.since);
        self.observed = Some(seen);
        let how = match decision {
            Decision::Hold(how) => how,
            Decision::Held { holder } => return Ok(Round::Held(holder)),
        };
        let ours = claim(
            spec.as_ref(),
            how,
            &self.identity,
            self.timing.lease_duration,
            Timestamp::now(),
        );
        let written = match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(ours),
                };
                self.leases.create(&PostParams::default(), &lease).await
            }
            Some(lease) => {
                let lease = Lease {
                    spec: Some(ours),
                    ..lease
                };
                self.leases
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match written {
            Ok(lease) => {
                // Our own write is the record to time from.
                self.observed = Some(Observation {
                    lease: lease.spec,
                    since: Instant::now(),
                });
                Ok(Round::Leading)
            }
            // 409 also answers a create that lost to another replica's.
            Err(error) if is_conflict(&error) => Ok(Round::Raced),
            Err(error) => Err(error),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::testing::FakeApi;

    const PATH: &str =
        "/apis/coordination.k8s.io/v1/namespaces/kruise-system/leases/kruise-wasm-manager";

    fn holder(api: &FakeApi) -> Option<String> {
        api.get(PATH)?["spec"]["holderIdentity"]
            .as_str()
            .map(str::to_owned)
    }

    /// The shortest a Lease can say: whole seconds.
    const FAST: Timing = Timing {
        lease_duration: Duration::from_secs(1),
        renew_deadline: Duration::from_millis(600),
        retry_period: Duration::from_millis(50),
    };

    fn replica(api: &FakeApi, identity: &str) -> LeaderElection {
        LeaderElection::new(
            api.client(),
            "kruise-system",
            "kruise-wasm-manager",
            identity.to_owned(),
            FAST,
        )
    }

    /// Long enough for a standby to take an unrenewed Lease several times
    /// over.
    const PATIENCE: Duration = Duration::from_secs(4);

    #[test]
    fn timings_that_would_let_two_lead_are_refused() {
        assert_eq!(Timing::default().check(), Ok(()));
        assert_eq!(FAST.check(), Ok(()));
        let seconds = Duration::from_secs;
        for (lease, renew, retry) in [
            (
                Duration::from_millis(500),
                Duration::from_millis(300),
                Duration::from_millis(10),
            ),
            (seconds(10), seconds(10), seconds(2)),
            (seconds(15), seconds(10), seconds(10)),
            (seconds(15), seconds(10), Duration::ZERO),
        ] {
            let timing = Timing {
                lease_duration: lease,
                renew_deadline: renew,
                retry_period: retry,
            };
            assert!(timing.check().is_err(), "{timing:?}");
        }
    }

    #[tokio::test]
    async fn one_leads_the_other_stands_by_until_it_is_released() {
        let api = FakeApi::default();
        let mut first = replica(&api, "first");
        first.acquire().await;
        assert_eq!(holder(&api).as_deref(), Some("first"));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let leading = tokio::spawn(async move {
            tokio::select! {
                lost = first.keep() => panic!("the leader lost: {lost}"),
                _ = stopped => first.release().await,
            }
        });
        let mut second = replica(&api, "second");
        assert!(
            tokio::time::timeout(PATIENCE, second.acquire())
                .await
                .is_err(),
            "a renewed Lease is never taken"
        );
        stop.send(()).unwrap();
        leading.await.unwrap();
        assert_eq!(holder(&api), None);
        tokio::time::timeout(PATIENCE, second.acquire())
            .await
            .expect("a released Lease is taken at once");
        assert_eq!(holder(&api).as_deref(), Some("second"));
    }

    #[tokio::test]
    async fn a_leader_that_stops_renewing_is_replaced() {
        let api = FakeApi::default();
        let mut dead = replica(&api, "dead");
        dead.acquire().await;
        let mut standby = replica(&api, "standby");
        tokio::time::timeout(PATIENCE, standby.acquire())
            .await
            .expect("an expired Lease is taken");
        assert_eq!(holder(&api).as_deref(), Some("standby"));
        let lease = api.get(PATH).unwrap();
        assert_eq!(lease["spec"]["leaseTransitions"], 1);
        // The old leader, waking up, learns it lost.
        let lost = tokio::time::timeout(PATIENCE, dead.keep()).await.unwrap();
        assert!(
            matches!(lost, Lost::TakenBy(ref h) if h == "standby"),
            "{lost}"
        );
    }

    #[tokio::test]
    async fn a_leader_cut_off_from_the_api_gives_up_after_the_renew_deadline() {
        let api = FakeApi::default();
        let mut leader = replica(&api, "leader");
        leader.acquire().await;
        api.set_down(true);
        let lost = tokio::time::timeout(PATIENCE, leader.keep()).await.unwrap();
        assert!(matches!(lost, Lost::NotRenewed(_)), "{lost}");
    }

    #[tokio::test]
    async fn a_leader_whose_api_server_hangs_gives_up_after_the_renew_deadline() {
        let api = FakeApi::default();
        let mut leader = replica(&api, "leader");
        leader.acquire().await;
        api.set_delay(Duration::from_mins(1));
        let lost = tokio::time::timeout(PATIENCE, leader.keep())
            .await
            .expect("a hanging renewal is cut at the deadline");
        assert!(matches!(lost, Lost::NotRenewed(_)), "{lost}");
    }

    #[tokio::test]
    async fn of_two_replicas_racing_for_a_free_lease_one_wins() {
        let api = FakeApi::default();
        let (mut a, mut b) = (replica(&api, "a"), replica(&api, "b"));
        let (ra, rb) = tokio::join!(a.round(), b.round());
        let rounds = [ra.unwrap(), rb.unwrap()];
        let leading = rounds.iter().filter(|r| **r == Round::Leading).count();
        assert_eq!(leading, 1, "{rounds:?}");
        let holder = holder(&api).unwrap();
        assert!(holder == "a" || holder == "b");
    }
}
