//! The leader election's decisions, on plain data: whether a Lease is ours,
//! free or held, and the Lease to write. The rules are those of client-go's
//! `leaderelection` (what every Kubernetes controller manager does), so our
//! replicas and a reader of `kubectl get lease` see the usual record:
//! - a Lease is judged expired by *our* clock: by how long its record has
//!   stayed unchanged since we first saw it, never by comparing its
//!   `renewTime` with our clock (the two machines' clocks may differ);
//! - taking over from another holder counts a transition;
//! - a leader stepping down clears the holder, so a standby need not wait
//!   out the lease.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;

/// What to do with the Lease as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Write it as ours.
    Hold(Claim),
    /// `holder` holds it.
    Held { holder: String },
}

/// How we come to hold it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// There is no Lease: create it.
    Create,
    /// It is ours: renew it.
    Renew,
    /// Nobody holds it, or its holder let it expire: take it.
    TakeOver,
}

/// `unchanged_for`: how long the Lease's record has been as read, by our
/// clock (see [`Observation`]).
pub fn decide(current: Option<&LeaseSpec>, me: &str, unchanged_for: Duration) -> Decision {
    let Some(lease) = current else {
        return Decision::Hold(Claim::Create);
    };
    match lease.holder_identity.as_deref() {
        None | Some("") => Decision::Hold(Claim::TakeOver),
        Some(holder) if holder == me => Decision::Hold(Claim::Renew),
        Some(holder) => {
            // A missing or non-positive duration never protects a holder.
            let seconds = lease.lease_duration_seconds.unwrap_or(0).max(0);
            if unchanged_for >= Duration::from_secs(seconds.unsigned_abs().into()) {
                Decision::Hold(Claim::TakeOver)
            } else {
                Decision::Held {
                    holder: holder.to_owned(),
                }
            }
        }
    }
}

/// The Lease to write to hold it.
pub fn claim(
    current: Option<&LeaseSpec>,
    how: Claim,
    me: &str,
    lease_duration: Duration,
    now: Timestamp,
) -> LeaseSpec {
    let seconds = i32::try_from(lease_duration.as_secs()).unwrap_or(i32::MAX);
    let previous = current.cloned().unwrap_or_default();
    let transitions = previous.lease_transitions.unwrap_or(0);
    let (acquired, transitions) = match how {
        Claim::Create => (now, 0),
        Claim::Renew => (
            previous.acquire_time.as_ref().map_or(now, |t| t.0),
            transitions,
        ),
        Claim::TakeOver => {
            let had_holder = previous
                .holder_identity
                .as_deref()
                .is_some_and(|h| !h.is_empty());
            (
                now,
                if had_holder {
                    transitions.saturating_add(1)
                } else {
                    transitions
                },
            )
        }
    };
    LeaseSpec {
        holder_identity: Some(me.to_owned()),
        lease_duration_seconds: Some(seconds),
        acquire_time: Some(MicroTime(acquired)),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(transitions),
        ..previous
    }
}

/// The Lease of a leader stepping down: no holder, the transitions kept.
pub fn released(current: &LeaseSpec, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        ..current.clone()
    }
}

/// The Lease record as we last saw it, and since when (a monotonic
/// instant of ours) it has looked like that.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation<I> {
    pub lease: Option<LeaseSpec>,
    pub since: I,
}

impl<I: Copy> Observation<I> {
    /// What we know after reading `lease` at `now`: the same record keeps
    /// its first sighting; any change (a renewal) starts the clock again.
    pub fn after_reading(previous: Option<Self>, lease: Option<&LeaseSpec>, now: I) -> Self {
        match previous {
            Some(seen) if seen.lease.as_ref() == lease => seen,
            _ => Self {
                lease: lease.cloned(),
                since: now,
            },
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn held_by(holder: Option<&str>, seconds: Option<i32>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            lease_duration_seconds: seconds,
            acquire_time: Some(MicroTime(Timestamp::UNIX_EPOCH)),
            renew_time: Some(MicroTime(Timestamp::UNIX_EPOCH)),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        }
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap()
    }

    #[test]
    fn no_lease_is_created() {
        assert_eq!(
            decide(None, "me", Duration::ZERO),
            Decision::Hold(Claim::Create)
        );
        let lease = claim(None, Claim::Create, "me", 15 * SECOND, at(100));
        assert_eq!(lease.holder_identity.as_deref(), Some("me"));
        assert_eq!(lease.lease_duration_seconds, Some(15));
        assert_eq!(lease.acquire_time, Some(MicroTime(at(100))));
        assert_eq!(lease.renew_time, Some(MicroTime(at(100))));
        assert_eq!(lease.lease_transitions, Some(0));
    }

    #[test]
    fn our_lease_is_renewed_keeping_when_we_took_it() {
        let ours = held_by(Some("me"), Some(15));
        // Even long unchanged: it is ours.
        assert_eq!(
            decide(Some(&ours), "me", 60 * SECOND),
            Decision::Hold(Claim::Renew)
        );
        let lease = claim(Some(&ours), Claim::Renew, "me", 15 * SECOND, at(100));
        assert_eq!(lease.acquire_time, Some(MicroTime(Timestamp::UNIX_EPOCH)));
        assert_eq!(lease.renew_time, Some(MicroTime(at(100))));
        assert_eq!(lease.lease_transitions, Some(3));
    }

    #[test]
    fn another_holder_is_waited_out_for_the_lease_duration() {
        let theirs = held_by(Some("other"), Some(15));
        let held = Decision::Held {
            holder: "other".into(),
        };
        assert_eq!(decide(Some(&theirs), "me", Duration::ZERO), held);
        assert_eq!(decide(Some(&theirs), "me", 14 * SECOND), held);
        assert_eq!(
            decide(Some(&theirs), "me", 15 * SECOND),
            Decision::Hold(Claim::TakeOver)
        );
    }

    #[test]
    fn taking_over_from_a_holder_counts_a_transition() {
        let theirs = held_by(Some("other"), Some(15));
        let lease = claim(Some(&theirs), Claim::TakeOver, "me", 10 * SECOND, at(100));
        assert_eq!(lease.holder_identity.as_deref(), Some("me"));
        assert_eq!(lease.lease_duration_seconds, Some(10));
        assert_eq!(lease.acquire_time, Some(MicroTime(at(100))));
        assert_eq!(lease.lease_transitions, Some(4));
    }

    #[test]
    fn a_released_lease_is_taken_at_once_without_a_transition() {
        let theirs = held_by(Some("other"), Some(15));
        let free = released(&theirs, at(50));
        assert_eq!(free.holder_identity, None);
        assert_eq!(free.lease_transitions, Some(3));
        assert_eq!(
            decide(Some(&free), "me", Duration::ZERO),
            Decision::Hold(Claim::TakeOver)
        );
        let empty_name = held_by(Some(""), Some(15));
        assert_eq!(
            decide(Some(&empty_name), "me", Duration::ZERO),
            Decision::Hold(Claim::TakeOver)
        );
        let lease = claim(Some(&free), Claim::TakeOver, "me", 15 * SECOND, at(60));
        assert_eq!(lease.lease_transitions, Some(3));
    }

    #[test]
    fn a_lease_without_a_valid_duration_protects_nobody() {
        for seconds in [None, Some(0), Some(-5)] {
            let theirs = held_by(Some("other"), seconds);
            assert_eq!(
                decide(Some(&theirs), "me", Duration::ZERO),
                Decision::Hold(Claim::TakeOver),
                "{seconds:?}"
            );
        }
    }

    #[test]
    fn the_clock_restarts_whenever_the_record_changes() {
        let first = held_by(Some("other"), Some(15));
        let seen = Observation::after_reading(None, Some(&first), 10u64);
        assert_eq!(seen.since, 10);
        let same = Observation::after_reading(Some(seen), Some(&first), 20);
        assert_eq!(same.since, 10, "unchanged: first sighting kept");
        let mut renewed = first.clone();
        renewed.renew_time = Some(MicroTime(at(5)));
        let changed = Observation::after_reading(Some(same), Some(&renewed), 30);
        assert_eq!(changed.since, 30);
        let gone = Observation::after_reading(Some(changed), None, 40);
        assert_eq!(
            gone,
            Observation {
                lease: None,
                since: 40
            }
        );
    }
}
