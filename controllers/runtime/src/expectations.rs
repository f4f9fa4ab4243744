//! Reading from a shared watch's store without acting twice. A controller
//! that planned from a store which has not yet taken its own last writes
//! would create or delete again what it just created or deleted. So it
//! notes, per object it manages (a CloneSet, a SidecarSet), what its writes
//! left to see:
//! * the newest resourceVersion the API server answered a write with: the
//!   store has taken the write once it has seen that version
//!   ([`crate::shared::SharedWatch::has_seen`]);
//! * the pods it deleted: an immediate delete answers with the pod as it
//!   was, so the store has taken it once the pod is gone or deleting.
//!
//! A store that has not caught up within [`FRESH_READ_AFTER`] (a stuck
//! watch) is bypassed: the controller reads fresh from the API server, as
//! a consistent read cannot miss a write, and goes on doing so until the
//! store has caught up. A fresh read does not clear the notes: a store
//! still behind after it would otherwise pass for current in the next
//! round and lack what the owner wrote before.

use std::cell::OnceCell;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kube::api::ListParams;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use crate::shared::SharedWatch;

/// How long a controller waits for its store before it reads fresh.
pub const FRESH_READ_AFTER: Duration = Duration::from_secs(10);

/// What a store's reader must check for one owner.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unseen {
    /// The newest version a write was answered with.
    pub newest_version: Option<String>,
    /// The UIDs of the objects deleted.
    pub deleted: BTreeSet<String>,
}

/// Whether an owner may plan from the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// The store holds every write it made: read it.
    Current,
    /// Not yet: wait for the watch (its events trigger the next round).
    Behind,
    /// Waited too long: read fresh from the API server.
    Stale,
}

#[derive(Debug)]
struct Pending {
    unseen: Unseen,
    since: Instant,
}

/// Per owner (`namespace/name`), the writes its store has not shown yet.
#[derive(Debug, Default)]
pub struct Expectations {
    owners: Mutex<HashMap<String, Pending>>,
}

impl Expectations {
    /// A write answered with `resource_version`.
    pub fn wrote(&self, owner: &str, resource_version: Option<&str>) {
        self.note(owner, |unseen| {
            if let Some(version) = resource_version
                && newer(version, unseen.newest_version.as_deref())
            {
                unseen.newest_version = Some(version.to_owned());
            }
        });
    }

    /// A delete of the object with `uid`.
    pub fn deleted(&self, owner: &str, uid: &str) {
        self.note(owner, |unseen| {
            unseen.deleted.insert(uid.to_owned());
        });
    }

    /// Whether `owner` may read the store, given what the store says of a
    /// version and of a deleted object (still there and not deleting);
    /// forgets the owner's writes once they are all seen.
    pub fn freshness(
        &self,
        owner: &str,
        now: Instant,
        has_seen: impl Fn(&str) -> bool,
        still_there: impl Fn(&str) -> bool,
    ) -> Freshness {
        let mut owners = lock(&self.owners);
        let Some(pending) = owners.get_mut(owner) else {
            return Freshness::Current;
        };
        let unseen = &mut pending.unseen;
        if unseen.newest_version.as_deref().is_some_and(&has_seen) {
            unseen.newest_version = None;
        }
        unseen.deleted.retain(|uid| still_there(uid));
        if unseen == &Unseen::default() {
            owners.remove(owner);
            Freshness::Current
        } else if now.duration_since(pending.since) < FRESH_READ_AFTER {
            Freshness::Behind
        } else {
            Freshness::Stale
        }
    }

    /// Drops `owner`'s notes: it is gone, and no round of it will read
    /// them (without this they would stay for the manager's lifetime).
    pub fn forget(&self, owner: &str) {
        lock(&self.owners).remove(owner);
    }

    fn note(&self, owner: &str, change: impl FnOnce(&mut Unseen)) {
        let mut owners = lock(&self.owners);
        let pending = owners.entry(owner.to_owned()).or_insert_with(|| Pending {
            unseen: Unseen::default(),
            since: Instant::now(),
        });
        change(&mut pending.unseen);
    }
}

/// A shared watch read on behalf of owners (CloneSets, SidecarSets) that
/// write the objects it watches.
#[derive(Debug)]
pub struct WatchReads<K: Resource<DynamicType = ()> + Clone + Debug + 'static> {
    /// None: every read goes to the API server (reconcile unit tests).
    watch: Option<SharedWatch<K>>,
    expectations: Expectations,
}

/// What the store can tell an owner's round.
#[derive(Debug)]
enum StoreRead<K> {
    /// Every object in the store, which holds all the owner's writes.
    Current(Vec<Arc<K>>),
    /// The store lacks some of the owner's writes: wait for their watch
    /// events, which start the next round.
    Behind,
    /// No store to trust (none, not listed yet, or lagging too long):
    /// list from the API server.
    ReadFresh,
}

/// The objects `api` lists with `params` that `keep` keeps, read from the
/// API server (a consistent read): for a round that must see what others
/// wrote a moment before it, which no watch can promise to show yet.
pub async fn list_fresh<K>(
    api: &Api<K>,
    params: &ListParams,
    keep: impl Fn(&K) -> bool,
) -> Result<Vec<Arc<K>>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let listed = api.list(params).await?.items;
    Ok(listed
        .into_iter()
        .filter(|o| keep(o))
        .map(Arc::new)
        .collect())
}

impl<K> WatchReads<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    pub fn from_watch(watch: SharedWatch<K>) -> Self {
        Self {
            watch: Some(watch),
            expectations: Expectations::default(),
        }
    }

    pub fn api_only() -> Self {
        Self {
            watch: None,
            expectations: Expectations::default(),
        }
    }

    /// The objects `owner`'s round reads, those `keep` keeps: the store's
    /// own copies once it holds the owner's writes; listed through `api`
    /// with `params` (a consistent read) while the store cannot be
    /// trusted; None while it lacks some of the owner's writes (their
    /// watch events start the next round).
    pub async fn read_or_list(
        &self,
        owner: &str,
        api: &Api<K>,
        params: &ListParams,
        keep: impl Fn(&K) -> bool,
    ) -> Result<Option<Vec<Arc<K>>>, kube::Error> {
        match self.read(owner) {
            StoreRead::Current(objects) => {
                Ok(Some(objects.into_iter().filter(|o| keep(o)).collect()))
            }
            StoreRead::Behind => Ok(None),
            StoreRead::ReadFresh => list_fresh(api, params, keep).await.map(Some),
        }
    }

    /// The store's objects that `keep` keeps, once it holds `owner`'s
    /// writes; None otherwise, without asking the API server: for what a
    /// round can leave to a later one.
    pub fn cached(&self, owner: &str, keep: impl Fn(&K) -> bool) -> Option<Vec<Arc<K>>> {
        match self.read(owner) {
            StoreRead::Current(objects) => Some(objects.into_iter().filter(|o| keep(o)).collect()),
            StoreRead::Behind | StoreRead::ReadFresh => None,
        }
    }

    fn read(&self, owner: &str) -> StoreRead<K> {
        let Some(watch) = self.watch.as_ref().filter(|w| w.is_listed()) else {
            return StoreRead::ReadFresh;
        };
        let objects = watch.store().state();
        let freshness = {
            // Built only when the owner deleted something.
            let live: OnceCell<HashSet<&str>> = OnceCell::new();
            let still_there = |uid: &str| {
                live.get_or_init(|| {
                    objects
                        .iter()
                        .filter(|object| object.meta().deletion_timestamp.is_none())
                        .filter_map(|object| object.meta().uid.as_deref())
                        .collect()
                })
                .contains(uid)
            };
            self.expectations.freshness(
                owner,
                Instant::now(),
                |version| watch.has_seen(version),
                still_there,
            )
        };
        match freshness {
            Freshness::Current => StoreRead::Current(objects),
            Freshness::Behind => StoreRead::Behind,
            Freshness::Stale => {
                tracing::warn!(%owner, "the watch lags; reading from the API server");
                StoreRead::ReadFresh
            }
        }
    }

    /// Drops the notes of `owner`, which is gone.
    pub fn forget(&self, owner: &str) {
        self.expectations.forget(owner);
    }

    /// Where `owner`'s writes are noted.
    pub fn writes_of<'a>(&'a self, owner: &'a str) -> OwnerWrites<'a> {
        OwnerWrites {
            expectations: &self.expectations,
            owner,
        }
    }
}

/// Notes one owner's writes.
#[derive(Debug, Clone, Copy)]
pub struct OwnerWrites<'a> {
    expectations: &'a Expectations,
    owner: &'a str,
}

impl OwnerWrites<'_> {
    /// An object as the API server answered a create, update or patch.
    pub fn wrote(&self, object: &impl Resource) {
        self.expectations
            .wrote(self.owner, object.meta().resource_version.as_deref());
    }

    /// A delete of the object with `uid`; `answer` is the object when the
    /// API server sent it back (a graceful delete marks it).
    pub fn deleted(&self, uid: Option<&str>, answer: Option<&impl Resource>) {
        if let Some(uid) = uid {
            self.expectations.deleted(self.owner, uid);
        }
        if let Some(object) = answer {
            self.wrote(object);
        }
    }
}

/// Whether an object at resourceVersion `current` holds a write that was
/// answered with `written` (one object's versions only grow); a version
/// that is not a number never does, so its reader reads fresh.
pub fn holds_write(current: Option<&str>, written: &str) -> bool {
    match (current.map(str::parse::<u64>), written.parse::<u64>()) {
        (Some(Ok(current)), Ok(written)) => current >= written,
        _ => false,
    }
}

/// `version` is newer than `than`; versions that are not numbers are
/// kept (the store never reports them seen, so the owner reads fresh).
fn newer(version: &str, than: Option<&str>) -> bool {
    match (version.parse::<u64>(), than.map(str::parse::<u64>)) {
        (_, None) | (Err(_), _) => true,
        (Ok(version), Some(Ok(than))) => version > than,
        (Ok(_), Some(Err(_))) => false,
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    const OWNER: &str = "default/demo";

    fn seen_up_to(newest: u64) -> impl Fn(&str) -> bool {
        move |version| version.parse::<u64>().is_ok_and(|v| v <= newest)
    }

    fn nothing_there(_uid: &str) -> bool {
        false
    }

    #[test]
    fn an_owner_without_writes_reads_the_store() {
        let expectations = Expectations::default();
        let freshness = expectations.freshness(OWNER, Instant::now(), seen_up_to(0), nothing_there);
        assert_eq!(freshness, Freshness::Current);
    }

    #[test]
    fn the_store_is_current_once_it_has_seen_the_newest_write() {
        let expectations = Expectations::default();
        expectations.wrote(OWNER, Some("12"));
        expectations.wrote(OWNER, Some("15"));
        expectations.wrote(OWNER, Some("9"));
        let now = Instant::now();
        let check = |newest| expectations.freshness(OWNER, now, seen_up_to(newest), nothing_there);
        assert_eq!(check(12), Freshness::Behind);
        assert_eq!(check(15), Freshness::Current);
        // Forgotten: an older store no longer holds the owner back.
        assert_eq!(check(1), Freshness::Current);
        assert_eq!(
            expectations.freshness("default/other", now, seen_up_to(0), nothing_there),
            Freshness::Current
        );
    }

    #[test]
    fn a_forgotten_owner_reads_the_store_again() {
        let expectations = Expectations::default();
        expectations.wrote(OWNER, Some("12"));
        expectations.wrote("default/other", Some("12"));
        expectations.forget(OWNER);
        let now = Instant::now();
        let check = |owner| expectations.freshness(owner, now, seen_up_to(1), nothing_there);
        assert_eq!(check(OWNER), Freshness::Current);
        assert_eq!(check("default/other"), Freshness::Behind);
    }

    #[test]
    fn a_deleted_pod_is_seen_once_gone_or_deleting() {
        let expectations = Expectations::default();
        expectations.deleted(OWNER, "uid-a");
        expectations.deleted(OWNER, "uid-b");
        let now = Instant::now();
        let only_b_left = |uid: &str| uid == "uid-b";
        assert_eq!(
            expectations.freshness(OWNER, now, seen_up_to(100), only_b_left),
            Freshness::Behind
        );
        assert_eq!(
            expectations.freshness(OWNER, now, seen_up_to(100), nothing_there),
            Freshness::Current
        );
    }

    /// A fresh read leaves the notes: the store is read around until it
    /// shows the writes, not only once.
    #[test]
    fn a_store_behind_for_too_long_is_read_around_until_it_catches_up() {
        let expectations = Expectations::default();
        expectations.wrote(OWNER, Some("20"));
        let later = Instant::now() + FRESH_READ_AFTER + Duration::from_secs(1);
        for _ in 0..2 {
            assert_eq!(
                expectations.freshness(OWNER, later, seen_up_to(19), nothing_there),
                Freshness::Stale
            );
        }
        assert_eq!(
            expectations.freshness(OWNER, later, seen_up_to(20), nothing_there),
            Freshness::Current
        );
    }

    #[test]
    fn a_version_that_is_not_a_number_is_never_seen() {
        let expectations = Expectations::default();
        expectations.wrote(OWNER, Some("7"));
        expectations.wrote(OWNER, Some("opaque"));
        expectations.wrote(OWNER, Some("8"));
        let never = |_: &str| false;
        let now = Instant::now();
        assert_eq!(
            expectations.freshness(OWNER, now, never, nothing_there),
            Freshness::Behind
        );
        assert!(newer("opaque", Some("7")));
        assert!(!newer("8", Some("opaque")));
        assert!(newer("8", Some("7")) && !newer("7", Some("8")));
    }

    #[test]
    fn a_copy_holds_a_write_once_its_version_has_reached_the_answers() {
        assert!(holds_write(Some("12"), "12"));
        assert!(holds_write(Some("13"), "12"));
        assert!(!holds_write(Some("11"), "12"));
        assert!(!holds_write(None, "12"));
        assert!(!holds_write(Some("opaque"), "12"));
        assert!(!holds_write(Some("12"), "opaque"));
    }

    /// Makes `owner`'s notes older than [`FRESH_READ_AFTER`].
    fn age(expectations: &Expectations, owner: &str) {
        let mut owners = lock(&expectations.owners);
        let pending = owners.get_mut(owner).expect("notes to age");
        pending.since = Instant::now()
            .checked_sub(FRESH_READ_AFTER + Duration::from_secs(1))
            .expect("a clock past its first seconds");
    }

    /// A store behind for too long is listed around in every round until
    /// it shows the owner's writes; one LIST does not make it trusted.
    #[tokio::test]
    async fn a_store_read_around_stays_read_around_until_it_catches_up() {
        use crate::testing::{FakeApi, FedWatch};
        use k8s_openapi::api::core::v1::Pod;

        let api = FakeApi::default();
        let pod = |version: &str| {
            serde_json::from_value::<Pod>(serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "a", "namespace": "default", "uid": "a-uid",
                             "resourceVersion": version},
            }))
            .expect("a pod")
        };
        api.insert("pods", serde_json::to_value(pod("1")).expect("json"));
        let lagging = FedWatch::<Pod>::listed([]).await;
        let reads = WatchReads::from_watch(lagging.watch.clone());
        reads.writes_of(OWNER).wrote(&pod("1000"));
        age(&reads.expectations, OWNER);
        let pods_api = Api::<Pod>::namespaced(api.client(), "default");
        let read = || async {
            let read = reads
                .read_or_list(OWNER, &pods_api, &ListParams::default(), |_| true)
                .await
                .expect("a read");
            read.expect("a stale store is read around, not waited for")
                .len()
        };
        let lists = || api.seen().iter().filter(|s| s.method == "GET").count();

        assert_eq!((read().await, lists()), (1, 1), "listed");
        assert_eq!((read().await, lists()), (1, 2), "listed again");
        lagging.apply([pod("1000")]).await;
        assert_eq!((read().await, lists()), (1, 2), "read from the store");
    }
}
