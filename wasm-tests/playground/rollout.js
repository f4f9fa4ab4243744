// The CloneSet rollout simulator, shared by the playground's rollout table
// and the test suites (test/golden.js): a port of `Sim` in
// policies/core/tests/cloneset_common/mod.rs, as far as the rollout fixtures
// use it: pods as plain JSON, a clock that starts at T0 and advances a
// second per reconcile, deletions at once. It drives the package's
// planCloneSet and cloneSetStatus (`api`).

const T0 = Date.parse('2024-05-01T10:00:00Z');
export const LABEL_REVISION = 'controller-revision-hash';
const LABEL_POD_TEMPLATE_HASH = 'pod-template-hash';
const LABEL_LIFECYCLE_STATE = 'lifecycle.apps.kruise.io/state';
const LABEL_SPECIFIED_DELETE = 'apps.kruise.io/specified-delete';
const IN_PLACE_READY = 'InPlaceUpdateReady';
const IN_PLACE_STATE = 'apps.kruise.io/inplace-update-state';

const rfc3339 = (ms) => new Date(ms).toISOString().replace('.000Z', 'Z');
const shortHash = (revision) => revision.split('-').pop();

function setCondition(pod, type, status, lastTransitionTime) {
  pod.status ??= {};
  pod.status.conditions = (pod.status.conditions ?? []).filter((c) => c.type !== type);
  pod.status.conditions.push(lastTransitionTime ? { type, status, lastTransitionTime } : { type, status });
}

function setLabel(pod, key, value) {
  pod.metadata.labels ??= {};
  pod.metadata.labels[key] = value;
}

const conditionOf = (pod, type) => (pod.status?.conditions ?? []).find((c) => c.type === type);

/** `ready_pod`: scheduled, Running, Ready since T0 - 1h, `Normal`. */
function readyPod(name, revision, image) {
  const since = rfc3339(T0 - 3600_000);
  return {
    metadata: {
      name,
      labels: {
        app: 'demo',
        [LABEL_REVISION]: revision,
        [LABEL_POD_TEMPLATE_HASH]: shortHash(revision),
        [LABEL_LIFECYCLE_STATE]: 'Normal',
      },
      creationTimestamp: since,
    },
    spec: {
      nodeName: 'node-1',
      containers: [{ name: 'app', image }],
      readinessGates: [{ conditionType: IN_PLACE_READY }],
    },
    status: {
      phase: 'Running',
      conditions: [
        { type: 'Ready', status: 'True', lastTransitionTime: since },
        { type: IN_PLACE_READY, status: 'True' },
      ],
      containerStatuses: [{ name: 'app', image, imageID: `id-${image}`, ready: true, restartCount: 0 }],
    },
  };
}

export class RolloutSim {
  constructor(api, cloneset, revisions, initialPods) {
    this.api = api;
    this.cloneset = structuredClone(cloneset);
    this.revisions = revisions;
    this.now = T0;
    this.pods = [];
    for (let i = 0; i < initialPods.count; i++) {
      this.pods.push(readyPod(`demo-old${i}`, initialPods.revision, this.imageOf(initialPods.revision)));
    }
    this.nextId = this.pods.length;
  }

  /** The image of a revision's template (the Rust `image_of`). */
  imageOf(revision) {
    const image = this.revisions.templates[revision]?.spec?.containers?.[0]?.image;
    if (!image) throw new Error(`no image for revision ${revision}`);
    return image;
  }

  request() {
    return { cloneset: this.cloneset, pods: this.pods, revisions: this.revisions, now: rfc3339(this.now) };
  }

  find(name) {
    const pod = this.pods.find((p) => p.metadata.name === name);
    if (!pod) throw new Error(`the plan names pod ${name}, which does not exist`);
    return pod;
  }

  /** Plan, apply, advance the clock a second. */
  reconcile() {
    const plan = this.api.planCloneSet(this.request());
    this.apply(plan);
    this.now += 1000;
    return plan;
  }

  apply(plan) {
    for (const { revision, count } of plan.create) {
      for (let i = 0; i < count; i++) {
        const pod = readyPod(`demo-new${this.nextId++}`, revision, this.imageOf(revision));
        pod.metadata.creationTimestamp = rfc3339(this.now);
        delete pod.spec.nodeName;
        pod.status.phase = 'Pending';
        delete pod.status.containerStatuses;
        setCondition(pod, 'Ready', 'False');
        setLabel(pod, LABEL_LIFECYCLE_STATE, 'PreparingNormal');
        this.pods.push(pod);
      }
    }
    for (const name of plan.delete) this.pods = this.pods.filter((p) => p.metadata.name !== name);
    for (const name of plan.markSpecifiedDelete) setLabel(this.find(name), LABEL_SPECIFIED_DELETE, 'true');
    for (const { pod, to } of plan.lifecycle) setLabel(this.find(pod), LABEL_LIFECYCLE_STATE, to);
    for (const { pod, value } of plan.templateHashFix) setLabel(this.find(pod), LABEL_POD_TEMPLATE_HASH, value);
    for (const update of plan.inPlaceUpdate) {
      const pod = this.find(update.pod);
      const oldId = pod.status?.containerStatuses?.[0]?.imageID ?? null;
      setLabel(pod, LABEL_REVISION, update.revision);
      setLabel(pod, LABEL_POD_TEMPLATE_HASH, shortHash(update.revision));
      setLabel(pod, LABEL_LIFECYCLE_STATE, 'Updating');
      for (const [container, image] of Object.entries(update.images)) {
        for (const c of pod.spec.containers) if (c.name === container) c.image = image;
      }
      pod.metadata.annotations ??= {};
      pod.metadata.annotations[IN_PLACE_STATE] = JSON.stringify({
        lastContainerStatuses: { app: { imageID: oldId } },
        revision: update.revision,
      });
      setCondition(pod, IN_PLACE_READY, 'False');
      setCondition(pod, 'Ready', 'False');
    }
    for (const done of plan.inPlaceComplete) {
      const pod = this.find(done.pod);
      setCondition(pod, IN_PLACE_READY, 'True');
      if (done.to) setLabel(pod, LABEL_LIFECYCLE_STATE, done.to);
      const statuses = pod.status?.containerStatuses;
      if (statuses && statuses.every((c) => c.ready)) setCondition(pod, 'Ready', 'True', rfc3339(this.now));
    }
  }

  /** Every pod scheduled, Running its spec image, Ready if its gates allow. */
  makeReady() {
    for (const pod of this.pods) {
      pod.spec.nodeName ??= 'node-1';
      const image = pod.spec.containers[0].image;
      pod.status ??= {};
      pod.status.phase = 'Running';
      pod.status.containerStatuses = [{ name: 'app', image, imageID: `id-${image}`, ready: true, restartCount: 0 }];
      if (pod.metadata.labels?.[LABEL_LIFECYCLE_STATE] === 'PreparingNormal') {
        setLabel(pod, LABEL_LIFECYCLE_STATE, 'Normal');
      }
      const gate = conditionOf(pod, IN_PLACE_READY);
      const gateOpen = gate === undefined || gate.status === 'True';
      if (gateOpen && conditionOf(pod, 'Ready')?.status !== 'True') {
        setCondition(pod, 'Ready', 'True', rfc3339(this.now));
      }
    }
  }

  status() {
    return this.api.cloneSetStatus(this.request());
  }

  /** The `kubectl get clone` columns plus the old/new split of active pods. */
  columns() {
    const status = this.status();
    return {
      desired: this.cloneset.spec.replicas ?? 1,
      updated: status.updatedReplicas,
      updatedReady: status.updatedReadyReplicas,
      ready: status.readyReplicas,
      total: status.replicas,
      // status counts active pods only; the updated ones are the new ones.
      old: status.replicas - status.updatedReplicas,
      new: status.updatedReplicas,
    };
  }
}
