//! Where a round reads its CloneSet's pods, revisions and claims. From the
//! manager's shared watches, at no cost to the API server, once each store
//! holds every write the CloneSet's earlier rounds made to it (see
//! [`kruise_controller_runtime::expectations`]); from the API server, a
//! consistent LIST, while a store has not been listed yet or has lagged
//! too long. Until a store catches up the round waits: the watch events
//! of the writes it waits for start the next one.

use std::collections::BTreeSet;
use std::fmt::Debug;

use futures::{StreamExt, TryStreamExt, stream};

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kruise_api::CloneSet;
use kruise_controller_runtime::context::Context;
use kruise_controller_runtime::expectations::WatchReads;
use kruise_core::cloneset::claims::{held_id, holder_names};
use kruise_core::cloneset::{LABEL_INSTANCE_ID, is_active};
use kruise_core::owner::{is_controlled_by, is_orphan};
use kruise_core::selector::{matches, to_selector_string, validate};
use kube::api::ListParams;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::reconcile::ReconcileError;

/// How many pods a round reads by name at once (see `Owner::holders`).
const HOLDER_READS_AT_ONCE: usize = 8;

/// The CloneSet controller's context: the shared one, and where its pods,
/// revisions and claims are read (per CloneSet, `namespace/name`).
pub struct CloneSetContext {
    pub shared: Context,
    pub pods: WatchReads<Pod>,
    pub revisions: WatchReads<ControllerRevision>,
    pub claims: WatchReads<PersistentVolumeClaim>,
}

/// What a round plans from.
pub struct Owned {
    pub pods: Vec<Pod>,
    pub revisions: Vec<ControllerRevision>,
    /// Every claim with an instance id in the namespace (none read when
    /// the CloneSet has no claim templates).
    pub claims: Vec<PersistentVolumeClaim>,
    /// Pods it controls whose labels its selector no longer matches (a
    /// user relabelled them out of service), to be released. Read from the
    /// pod watch; while it cannot be trusted, only those found among the
    /// `holders`, and a later round releases the others.
    pub strays: Vec<Pod>,
    /// The instance ids of pods outside its selection named after one of
    /// its claims that no pod of `pods` has (strays among them): their
    /// claims are in use and their names taken, so the claims are neither
    /// deleted nor given to a new pod.
    pub held_elsewhere: BTreeSet<String>,
}

/// The pods and revisions `cloneset` (with `uid`) controls; `key` is its
/// `namespace/name`. None while a store lacks some of this CloneSet's
/// writes.
pub async fn read(
    context: &CloneSetContext,
    cloneset: &CloneSet,
    namespace: &str,
    uid: &str,
    key: &str,
) -> Result<Option<Owned>, ReconcileError> {
    // A selector the API server would refuse must not read as "no pods":
    // the plan would create them all.
    validate(&cloneset.spec.selector).map_err(|e| ReconcileError::Selector(e.to_string()))?;
    let owner = Owner {
        context,
        cloneset,
        namespace,
        uid,
        key,
    };
    let Some(pods) = owner
        .objects(&context.pods, Ownership::Controlled, "list pods")
        .await?
    else {
        return Ok(None);
    };
    let Some(revisions) = owner
        .objects(
            &context.revisions,
            Ownership::ControlledOrOrphan,
            "list revisions",
        )
        .await?
    else {
        return Ok(None);
    };
    let Some(claims) = owner.claims().await? else {
        return Ok(None);
    };
    let holders = owner.holders(&pods, &claims).await?;
    let held_elsewhere = holders
        .iter()
        .filter_map(|pod| held_id(cloneset, pod.metadata.name.as_deref()?))
        .map(str::to_owned)
        .collect();
    let strays = owner.strays().unwrap_or_else(|| {
        holders
            .into_iter()
            .filter(|pod| owner.is_stray(pod))
            .collect()
    });
    Ok(Some(Owned {
        pods,
        revisions,
        claims,
        strays,
        held_elsewhere,
    }))
}

/// Which of the objects its selector matches a CloneSet reads as its own.
#[derive(Clone, Copy)]
enum Ownership {
    /// Those it controls: its pods (OpenKruise never adopts orphans).
    Controlled,
    /// Those it controls and those no one does: its revisions, as
    /// Kubernetes' revision history lists them, so a revision left by a
    /// CloneSet of the same name deleted with `--cascade=orphan` is taken
    /// again rather than recreated under a taken name.
    ControlledOrOrphan,
}

/// The CloneSet whose objects a round reads.
struct Owner<'a> {
    context: &'a CloneSetContext,
    cloneset: &'a CloneSet,
    namespace: &'a str,
    uid: &'a str,
    key: &'a str,
}

impl Owner<'_> {
    /// The claims carrying an instance id in the CloneSet's namespace,
    /// whoever owns them (a claim outlives its pod and is handed to the
    /// next pod of its id); none when the CloneSet has no claim templates.
    async fn claims(&self) -> Result<Option<Vec<PersistentVolumeClaim>>, ReconcileError> {
        if self.cloneset.spec.volume_claim_templates.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let api = Api::<PersistentVolumeClaim>::namespaced(
            self.context.shared.client.clone(),
            self.namespace,
        );
        let params = ListParams::default().labels(LABEL_INSTANCE_ID);
        let with_id = |claim: &PersistentVolumeClaim| {
            claim.namespace().as_deref() == Some(self.namespace)
                && claim.labels().contains_key(LABEL_INSTANCE_ID)
        };
        let read = self
            .context
            .claims
            .read_or_list(self.key, &api, &params, with_id)
            .await
            .map_err(ReconcileError::api("list claims"))?;
        Ok(read.map(|claims| {
            claims
                .iter()
                .map(|c| PersistentVolumeClaim::clone(c))
                .collect()
        }))
    }

    /// Its active pods that its selector no longer matches (spec 03 §3),
    /// as the pod watch has them; None while the watch cannot be trusted.
    /// One going away leaves its claims to the CloneSet, as any pod that
    /// goes does.
    fn strays(&self) -> Option<Vec<Pod>> {
        self.cached_pods(|pod| self.is_stray(pod))
    }

    /// The pods of the watch in the CloneSet's namespace that `keep`
    /// takes; None while the watch cannot be trusted.
    fn cached_pods(&self, keep: impl Fn(&Pod) -> bool) -> Option<Vec<Pod>> {
        let in_namespace =
            |pod: &Pod| pod.namespace().as_deref() == Some(self.namespace) && keep(pod);
        let cached = self.context.pods.cached(self.key, in_namespace)?;
        Some(cached.iter().map(|pod| Pod::clone(pod)).collect())
    }

    fn is_stray(&self, pod: &Pod) -> bool {
        is_active(pod)
            && is_controlled_by(pod.meta(), self.uid)
            && !matches(&self.cloneset.spec.selector, pod.labels()).unwrap_or(true)
    }

    /// The pods (in any state) outside `pods` named after one of `claims`
    /// that no pod of `pods` has ([`holder_names`]): from the pod watch, or
    /// asked for by name while it cannot be trusted (a LIST by the selector
    /// cannot show a pod relabelled out of it).
    async fn holders(
        &self,
        pods: &[Pod],
        claims: &[PersistentVolumeClaim],
    ) -> Result<Vec<Pod>, ReconcileError> {
        let names = holder_names(self.cloneset, pods, claims);
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let holder = |pod: &Pod| {
            pod.metadata
                .name
                .as_ref()
                .is_some_and(|n| names.contains(n))
        };
        if let Some(cached) = self.cached_pods(holder) {
            return Ok(cached);
        }
        let api = Api::<Pod>::namespaced(self.context.shared.client.clone(), self.namespace);
        let reads = names.into_iter().map(|name| {
            let api = api.clone();
            async move {
                let read = api.get_opt(&name).await;
                read.map_err(ReconcileError::api(format!("read pod {name}")))
            }
        });
        // A few at a time: only claims without a listed pod are looked for.
        let found: Vec<Option<Pod>> = stream::iter(reads)
            .buffer_unordered(HOLDER_READS_AT_ONCE)
            .try_collect()
            .await?;
        Ok(found.into_iter().flatten().collect())
    }

    /// The objects of `reads` in the CloneSet's namespace that its
    /// selector matches (those a LIST by the selector would give) and
    /// `ownership` takes.
    async fn objects<K>(
        &self,
        reads: &WatchReads<K>,
        ownership: Ownership,
        what: &str,
    ) -> Result<Option<Vec<K>>, ReconcileError>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + Debug
            + Send
            + Sync
            + 'static,
    {
        let selector = &self.cloneset.spec.selector;
        let api = Api::<K>::namespaced(self.context.shared.client.clone(), self.namespace);
        let params = ListParams::default().labels(&to_selector_string(selector));
        let owned = |object: &K| {
            object.namespace().as_deref() == Some(self.namespace)
                && match ownership {
                    Ownership::Controlled => is_controlled_by(object.meta(), self.uid),
                    Ownership::ControlledOrOrphan => {
                        is_controlled_by(object.meta(), self.uid) || is_orphan(object.meta())
                    }
                }
                && matches(selector, object.labels()).unwrap_or(false)
        };
        let read = reads
            .read_or_list(self.key, &api, &params, owned)
            .await
            .map_err(ReconcileError::api(what))?;
        Ok(read.map(|objects| objects.iter().map(|object| K::clone(object)).collect()))
    }
}
