//! Shared builders and a tiny in-memory cluster for the CloneSet planner
//! tests. The simulator applies a plan the way the controller and kubelet
//! would, with no API server in between.

#![allow(dead_code, clippy::unwrap_used, clippy::missing_panics_doc)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kruise_api::CloneSet;
use kruise_core::cloneset::{
    ANNOTATION_IN_PLACE_UPDATE_STATE, CONDITION_IN_PLACE_UPDATE_READY, FeatureGates,
    LABEL_LIFECYCLE_STATE, LABEL_POD_TEMPLATE_HASH, LABEL_REVISION, LABEL_SPECIFIED_DELETE,
    LifecycleState, Plan, PlanInput, Revisions, compute_status, plan,
};
use serde_json::json;

pub const REV_A: &str = "demo-aaaaa";
pub const REV_B: &str = "demo-bbbbb";

pub fn t0() -> Timestamp {
    "2024-05-01T10:00:00Z".parse().unwrap()
}

pub fn int_or_str(text: &str) -> IntOrString {
    text.parse::<i32>()
        .map_or_else(|_| IntOrString::String(text.to_owned()), IntOrString::Int)
}

pub fn template(image: &str) -> PodTemplateSpec {
    serde_json::from_value(json!({
        "metadata": {"labels": {"app": "demo"}},
        "spec": {"containers": [{"name": "app", "image": image}]}
    }))
    .unwrap()
}

/// Revision A runs nginx:1.0; B changes only the image (in-place-able).
pub fn image_revisions(current: &str, update: &str) -> Revisions {
    Revisions {
        current: current.to_owned(),
        update: update.to_owned(),
        templates: BTreeMap::from([
            (REV_A.to_owned(), template("nginx:1.0")),
            (REV_B.to_owned(), template("nginx:1.1")),
        ]),
    }
}

/// Like `image_revisions`, but B also adds an env var: not in-place-able.
pub fn env_revisions(current: &str, update: &str) -> Revisions {
    let mut revisions = image_revisions(current, update);
    let mut b = template("nginx:1.1");
    b.spec.as_mut().unwrap().containers[0].env = Some(vec![
        serde_json::from_value(json!({"name": "MODE", "value": "x"})).unwrap(),
    ]);
    revisions.templates.insert(REV_B.to_owned(), b);
    revisions
}

/// upstream `createTestCloneSet(replicas, partition, maxUnavailable, maxSurge)`.
pub fn cloneset(
    replicas: i32,
    partition: &str,
    max_unavailable: &str,
    max_surge: &str,
) -> CloneSet {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {"name": "demo", "namespace": "default", "generation": 1},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "demo"}},
            "template": template("nginx:1.1"),
            "updateStrategy": {
                "type": "ReCreate",
                "partition": int_or_str(partition),
                "maxUnavailable": int_or_str(max_unavailable),
                "maxSurge": int_or_str(max_surge),
            }
        }
    }))
    .unwrap()
}

pub fn image_of(revision: &str) -> &'static str {
    if revision == REV_A {
        "nginx:1.0"
    } else {
        "nginx:1.1"
    }
}

/// A scheduled, Running, Ready, `Normal` pod on `revision`, ready since `t0 - 1h`.
pub fn ready_pod(name: &str, revision: &str) -> Pod {
    let since = Time(t0() - SignedDuration::from_hours(1));
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {
                "app": "demo",
                LABEL_REVISION: revision,
                LABEL_POD_TEMPLATE_HASH: revision.rsplit('-').next().unwrap(),
                LABEL_LIFECYCLE_STATE: "Normal",
            },
            "creationTimestamp": since,
        },
        "spec": {
            "nodeName": "node-1",
            "containers": [{"name": "app", "image": image_of(revision)}],
            "readinessGates": [{"conditionType": CONDITION_IN_PLACE_UPDATE_READY}],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": since},
                {"type": CONDITION_IN_PLACE_UPDATE_READY, "status": "True"},
            ],
            "containerStatuses": [{
                "name": "app", "image": image_of(revision), "imageID": format!("id-{}", image_of(revision)),
                "ready": true, "restartCount": 0,
            }],
        }
    }))
    .unwrap()
}

/// Running but not Ready (the Ready condition False).
pub fn unready_pod(name: &str, revision: &str) -> Pod {
    let mut pod = ready_pod(name, revision);
    set_condition(&mut pod, "Ready", "False");
    pod
}

pub fn set_condition(pod: &mut Pod, type_: &str, status: &str) {
    let conditions = pod
        .status
        .get_or_insert_default()
        .conditions
        .get_or_insert_default();
    conditions.retain(|c| c.type_ != type_);
    conditions.push(serde_json::from_value(json!({"type": type_, "status": status})).unwrap());
}

pub fn set_label(pod: &mut Pod, key: &str, value: &str) {
    pod.metadata
        .labels
        .get_or_insert_default()
        .insert(key.to_owned(), value.to_owned());
}

pub fn pods(prefix: &str, count: usize, revision: &str) -> Vec<Pod> {
    (0..count)
        .map(|i| ready_pod(&format!("{prefix}{i}"), revision))
        .collect()
}

pub fn run(cs: &CloneSet, pods: &[Pod], revisions: &Revisions, gates: FeatureGates) -> Plan {
    plan(&PlanInput {
        cloneset: cs,
        pods,
        revisions,
        now: t0(),
        gates,
    })
}

/// The `kubectl get clone` columns plus the old/new split.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Columns {
    pub desired: i32,
    pub updated: i32,
    pub updated_ready: i32,
    pub ready: i32,
    pub total: i32,
    pub old: i32,
    pub new: i32,
}

/// How the simulator finishes deletions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deletion {
    /// The pod disappears at once.
    Immediate,
    /// The pod gets a deletionTimestamp (inactive) and is removed by `reap`.
    Late,
}

/// An in-memory cluster: pods plus a clock.
#[derive(Debug)]
pub struct Sim {
    pub cloneset: CloneSet,
    pub pods: Vec<Pod>,
    pub revisions: Revisions,
    pub now: Timestamp,
    pub gates: FeatureGates,
    pub deletion: Deletion,
    /// New pods are created with their `InPlaceUpdateReady` gate open and
    /// turn `Normal` when scheduled, as the step tables assume; off, the
    /// planner's own write does both (the write-count bench).
    pub fold_gate_opening: bool,
    next_id: usize,
}

impl Sim {
    pub fn new(cloneset: CloneSet, pods: Vec<Pod>, revisions: Revisions) -> Self {
        let next_id = pods.len();
        Self {
            cloneset,
            pods,
            revisions,
            now: t0(),
            gates: FeatureGates::default(),
            deletion: Deletion::Immediate,
            fold_gate_opening: true,
            next_id,
        }
    }

    pub fn plan(&self) -> Plan {
        plan(&PlanInput {
            cloneset: &self.cloneset,
            pods: &self.pods,
            revisions: &self.revisions,
            now: self.now,
            gates: self.gates,
        })
    }

    /// One reconcile: plan and apply. The clock advances a second.
    pub fn reconcile(&mut self) -> Plan {
        let plan = self.plan();
        self.apply(&plan);
        self.now += SignedDuration::from_secs(1);
        plan
    }

    fn find(&mut self, name: &str) -> &mut Pod {
        self.pods
            .iter_mut()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .unwrap()
    }

    pub fn apply(&mut self, plan: &Plan) {
        for creation in &plan.create {
            for _ in 0..creation.count {
                let name = format!("demo-new{}", self.next_id);
                self.next_id += 1;
                let mut pod = ready_pod(&name, &creation.revision);
                // A new pod: unscheduled, Pending, not Ready.
                pod.metadata.creation_timestamp = Some(Time(self.now));
                pod.spec.as_mut().unwrap().node_name = None;
                let status = pod.status.as_mut().unwrap();
                status.phase = Some("Pending".to_owned());
                status.container_statuses = None;
                if !self.fold_gate_opening {
                    status.conditions = None;
                }
                set_condition(&mut pod, "Ready", "False");
                set_label(&mut pod, LABEL_LIFECYCLE_STATE, "PreparingNormal");
                self.pods.push(pod);
            }
        }
        for name in &plan.delete {
            match self.deletion {
                Deletion::Immediate => self
                    .pods
                    .retain(|p| p.metadata.name.as_deref() != Some(name)),
                Deletion::Late => {
                    let now = self.now;
                    self.find(name).metadata.deletion_timestamp = Some(Time(now));
                }
            }
        }
        for name in &plan.mark_specified_delete {
            set_label(self.find(name), LABEL_SPECIFIED_DELETE, "true");
        }
        for change in &plan.lifecycle {
            set_label(
                self.find(&change.pod),
                LABEL_LIFECYCLE_STATE,
                change.to.as_str(),
            );
        }
        for (name, hash) in &plan.template_hash_fix {
            set_label(self.find(name), LABEL_POD_TEMPLATE_HASH, hash);
        }
        for update in &plan.in_place_update {
            let pod = self.find(&update.pod);
            let old_id = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .map(|s| s[0].image_id.clone());
            set_label(pod, LABEL_REVISION, &update.spec.revision);
            set_label(
                pod,
                LABEL_POD_TEMPLATE_HASH,
                update.spec.revision.rsplit('-').next().unwrap(),
            );
            set_label(
                pod,
                LABEL_LIFECYCLE_STATE,
                LifecycleState::Updating.as_str(),
            );
            for (container, image) in &update.spec.container_images {
                let spec = pod.spec.as_mut().unwrap();
                spec.containers
                    .iter_mut()
                    .filter(|c| &c.name == container)
                    .for_each(|c| c.image = Some(image.clone()));
            }
            let state = json!({"revision": update.spec.revision, "lastContainerStatuses": {"app": {"imageID": old_id}}});
            pod.metadata.annotations.get_or_insert_default().insert(
                ANNOTATION_IN_PLACE_UPDATE_STATE.to_owned(),
                state.to_string(),
            );
            set_condition(pod, CONDITION_IN_PLACE_UPDATE_READY, "False");
            set_condition(pod, "Ready", "False");
        }
        for done in &plan.in_place_complete {
            let now = self.now;
            let pod = self.find(&done.pod);
            set_condition(pod, CONDITION_IN_PLACE_UPDATE_READY, "True");
            if let Some(to) = done.to {
                set_label(pod, LABEL_LIFECYCLE_STATE, to.as_str());
            }
            // kubelet: all gates True and containers ready → Ready.
            let running = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|s| s.iter().all(|c| c.ready));
            if running {
                mark_ready(pod, now);
            }
        }
    }

    /// An external event: the named pod (or every pod not yet ready) is
    /// scheduled, running its spec images, and Ready if its gates are open.
    /// New pods also leave `PreparingNormal` if `fold_gate_opening`.
    pub fn make_ready(&mut self, only: Option<&str>) {
        let now = self.now;
        for pod in &mut self.pods {
            if only.is_some_and(|name| pod.metadata.name.as_deref() != Some(name)) {
                continue;
            }
            let spec = pod.spec.as_mut().unwrap();
            spec.node_name.get_or_insert_with(|| "node-1".to_owned());
            let image = spec.containers[0].image.clone().unwrap();
            let status = pod.status.get_or_insert_default();
            status.phase = Some("Running".to_owned());
            status.container_statuses = Some(vec![serde_json::from_value(json!({
                "name": "app", "image": image, "imageID": format!("id-{image}"), "ready": true, "restartCount": 0
            })).unwrap()]);
            let labels = pod.metadata.labels.get_or_insert_default();
            if self.fold_gate_opening
                && labels.get(LABEL_LIFECYCLE_STATE).map(String::as_str) == Some("PreparingNormal")
            {
                labels.insert(LABEL_LIFECYCLE_STATE.to_owned(), "Normal".to_owned());
            }
            let gate_open = kruise_core::cloneset::is_running_and_ready(&{
                let mut probe = pod.clone();
                set_condition(&mut probe, "Ready", "True");
                probe
            });
            if gate_open && !kruise_core::cloneset::is_running_and_ready(pod) {
                mark_ready(pod, now);
            }
        }
    }

    /// A pod stops being Ready (probe failure).
    pub fn make_unready(&mut self, name: &str) {
        set_condition(self.find(name), "Ready", "False");
    }

    /// Late deletions finish.
    pub fn reap(&mut self) {
        self.pods
            .retain(|p| p.metadata.deletion_timestamp.is_none());
    }

    pub fn columns(&self) -> Columns {
        let status = compute_status(&self.cloneset, &self.pods, &self.revisions, None, self.now);
        let active: Vec<&Pod> = self
            .pods
            .iter()
            .filter(|p| kruise_core::cloneset::is_active(p))
            .collect();
        let new = active
            .iter()
            .filter(|p| kruise_core::cloneset::is_at_revision(p, &self.revisions.update))
            .count();
        Columns {
            desired: self.cloneset.spec.replicas.unwrap_or(1),
            updated: status.updated_replicas,
            updated_ready: status.updated_ready_replicas,
            ready: status.ready_replicas,
            total: status.replicas,
            old: i32::try_from(active.len() - new).unwrap(),
            new: i32::try_from(new).unwrap(),
        }
    }

    pub fn set_partition(&mut self, partition: &str) {
        self.cloneset
            .spec
            .update_strategy
            .as_mut()
            .unwrap()
            .partition = Some(int_or_str(partition));
    }
}

fn mark_ready(pod: &mut Pod, now: Timestamp) {
    let conditions = pod
        .status
        .get_or_insert_default()
        .conditions
        .get_or_insert_default();
    conditions.retain(|c| c.type_ != "Ready");
    conditions.push(
        serde_json::from_value(
            json!({"type": "Ready", "status": "True", "lastTransitionTime": Time(now)}),
        )
        .unwrap(),
    );
}
