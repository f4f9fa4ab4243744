// The checks of the golden cases and of the API's errors, shared by the Node
// suite (golden.test.js) and the Chromium one (browser/suite.js), so both run
// exactly the same code. Each check takes the package's exports (`api`) and
// a case already parsed from YAML, and throws an Error saying what is wrong.
//
// They follow the Rust runners, policies/core/tests/golden_injection.rs,
// golden_launch_priority.rs and cloneset_fixtures.rs, and the fixture
// folders' README.md.

import { lineDiffText } from '../playground/linediff.js';
import { LABEL_REVISION, RolloutSim } from '../playground/rollout.js';

/** JSON with object keys sorted, so equal values give equal text. */
export function canonical(value, indent = 0) {
  const sort = (v) => {
    if (Array.isArray(v)) return v.map(sort);
    if (v && typeof v === 'object') {
      return Object.fromEntries(Object.keys(v).sort().map((k) => [k, sort(v[k])]));
    }
    return v;
  };
  return JSON.stringify(sort(value), null, indent);
}

function assertSame(expected, actual, what) {
  if (canonical(expected) !== canonical(actual)) {
    const diff = lineDiffText(canonical(expected, 2), canonical(actual, 2))
      .split('\n')
      .filter((line) => !line.startsWith(' '))
      .join('\n');
    throw new Error(`${what} (- expected, + actual):\n${diff}`);
  }
}

function checkKeys(doc, required, optional) {
  if (!doc || typeof doc !== 'object' || Array.isArray(doc)) {
    throw new Error('unreadable case: not a mapping');
  }
  const unknown = Object.keys(doc).filter((k) => !required.includes(k) && !optional.includes(k));
  if (unknown.length > 0) throw new Error(`unreadable case: unknown field ${unknown.join(', ')}`);
  const missing = required.filter((k) => !(k in doc));
  if (missing.length > 0) throw new Error(`unreadable case: missing field ${missing.join(', ')}`);
}

/** Calls `f`, prefixing the message of anything it throws with `what`. */
function attempt(what, f) {
  try {
    return f();
  } catch (error) {
    throw new Error(`${what}: ${error.message}`);
  }
}

/**
 * Applies a JSON patch of add/remove/replace operations (all that a diff
 * produces) to a copy of `doc`: checks that `jsonPatch` really leads from
 * one pod to the other.
 */
export function applyPatch(doc, ops) {
  const root = { doc: structuredClone(doc) };
  for (const { op, path, value } of ops) {
    const keys = ['doc', ...path.split('/').slice(1).map((k) => k.replace(/~1/g, '/').replace(/~0/g, '~'))];
    const last = keys.pop();
    const parent = keys.reduce((node, key) => node[key], root);
    const index = Array.isArray(parent) ? (last === '-' ? parent.length : Number(last)) : last;
    if (op === 'add' && Array.isArray(parent)) parent.splice(index, 0, value);
    else if (op === 'add' || op === 'replace') parent[index] = value;
    else if (op === 'remove' && Array.isArray(parent)) parent.splice(index, 1);
    else if (op === 'remove') delete parent[index];
    else throw new Error(`unexpected operation ${op}`);
  }
  return root.doc;
}

/** One case of policies/fixtures/injection (format: its README.md). */
export function checkInjectionCase(api, doc) {
  checkKeys(
    doc,
    ['description', 'now', 'sidecarSets', 'pod'],
    ['namespace', 'namespaceLabels', 'revisions', 'randomDraw', 'expected', 'expectedError'],
  );
  // As the cluster stores them: defaulted, hashes stamped unless given.
  const sidecarSets = doc.sidecarSets.map((s, i) =>
    attempt(`sidecarSets[${i}]`, () => api.prepareSidecarSet(s)),
  );
  const pod = attempt('pod', () => api.normalizePod(doc.pod));
  const request = { pod, sidecarSets, now: doc.now };
  for (const key of ['namespace', 'namespaceLabels', 'revisions', 'randomDraw']) {
    if (doc[key] !== undefined) request[key] = doc[key];
  }
  const hasExpected = doc.expected !== undefined;
  const hasError = doc.expectedError !== undefined;
  if (hasExpected && !hasError) {
    const expected = attempt('expected', () => api.normalizePod(doc.expected));
    const injected = attempt('injection failed', () => api.injectSidecars(request));
    assertSame(expected, injected.pod, 'unexpected pod');
    if (!Array.isArray(injected.sidecarSets)) throw new Error('sidecarSets is not a list of names');
    // Injection is idempotent: the expected pod, injected again, stays as it is.
    const again = attempt('second injection failed', () =>
      api.injectSidecars({ ...request, pod: expected }),
    );
    assertSame(expected, again.pod, 'a second injection changed the pod');
    // The patch a policy would return leads from the pod to the expected one.
    assertSame(expected, applyPatch(pod, api.jsonPatch(pod, expected)), 'the JSON patch');
  } else if (hasError && !hasExpected) {
    expectError(() => api.injectSidecars(request), doc.expectedError);
  } else {
    throw new Error('give exactly one of expected and expectedError');
  }
}

/** One case of policies/fixtures/launch-priority (format: its README.md). */
export function checkLaunchPriorityCase(api, doc) {
  checkKeys(doc, ['description', 'pod', 'nameSuffix'], ['expected', 'unchanged', 'expectedError']);
  const result = () => api.applyLaunchPriority(doc.pod, doc.nameSuffix);
  const has = (key) => doc[key] !== undefined && doc[key] !== false;
  const given = ['expected', 'unchanged', 'expectedError'].filter(has);
  if (given.length !== 1) {
    throw new Error('give exactly one of expected, unchanged, expectedError');
  }
  if (has('expected')) {
    const mutated = attempt('mutation failed', result);
    if (mutated === null) throw new Error('expected a mutation, got null');
    assertSame(attempt('expected', () => api.normalizePod(doc.expected)), mutated, 'unexpected pod');
    const again = attempt('second pass failed', () =>
      api.applyLaunchPriority(mutated, doc.nameSuffix),
    );
    if (again !== null) throw new Error('a second pass changed the pod');
  } else if (has('unchanged')) {
    const mutated = attempt('mutation failed', result);
    if (mutated !== null) throw new Error('expected no change (null), got a pod');
  } else {
    expectError(result, doc.expectedError);
  }
}

/**
 * The cases of a file that holds a list of them (`cases:`; other top-level
 * keys are only YAML anchors), checked to be a non-empty list.
 */
export function casesOf(doc) {
  if (!doc || !Array.isArray(doc.cases)) throw new Error('unreadable file: no list of cases');
  return doc.cases;
}

/**
 * One case of policies/fixtures/cloneset/planner-cases.yaml (format: its
 * README.md): one planning round, summarized as the Rust runner
 * (cloneset_fixtures.rs) does and compared with `expect`, whose left-out
 * keys must be empty.
 */
export function checkCloneSetPlanCase(api, doc) {
  checkKeys(doc, ['name', 'now', 'cloneset', 'revisions', 'pods', 'expect'], []);
  const expectKeys = ['create', 'delete', 'markSpecifiedDelete', 'lifecycle', 'inPlaceUpdate', 'requeueAfterSeconds'];
  checkKeys(doc.expect, ['stage'], expectKeys);
  const plan = attempt('planning failed', () =>
    api.planCloneSet({ cloneset: doc.cloneset, pods: doc.pods, revisions: doc.revisions, now: doc.now }),
  );
  const summary = {
    stage: plan.stage,
    create: plan.create.map(({ revision, count }) => ({ revision, count })),
    delete: plan.delete,
    markSpecifiedDelete: plan.markSpecifiedDelete,
    lifecycle: plan.lifecycle.map(({ pod, to }) => ({ pod, to })),
    inPlaceUpdate: plan.inPlaceUpdate.map(({ pod, revision, images }) => ({ pod, revision, images })),
    requeueAfterSeconds: plan.requeueAfterSeconds,
  };
  const expected = {
    stage: doc.expect.stage,
    create: doc.expect.create ?? [],
    delete: doc.expect.delete ?? [],
    markSpecifiedDelete: doc.expect.markSpecifiedDelete ?? [],
    lifecycle: doc.expect.lifecycle ?? [],
    inPlaceUpdate: doc.expect.inPlaceUpdate ?? [],
    requeueAfterSeconds: doc.expect.requeueAfterSeconds ?? null,
  };
  assertSame(expected, summary, 'unexpected plan');
}

/**
 * One rollout of policies/fixtures/cloneset (seed-rollout.yaml,
 * in-place-surge.yaml; format: its README.md), replayed step by step on the
 * simulator above as cloneset_rollout_table.rs does. Returns the simulator
 * and the pods updated in place.
 */
export function checkCloneSetRollout(api, doc) {
  checkKeys(doc, ['name', 'cloneset', 'revisions', 'initialPods', 'steps'], []);
  checkKeys(doc.initialPods, ['count', 'revision'], ['ready']);
  const sim = new RolloutSim(api, doc.cloneset, doc.revisions, doc.initialPods);
  const inPlace = [];
  doc.steps.forEach((step, index) => {
    const label = `step #${index} ${step.step}`;
    attempt(label, () => {
      checkKeys(step, ['step', 'do', 'expect'], ['steady', 'currentRevision', 'inPlace']);
      if (step.do === 'observe') {
        // nothing happens
      } else if (step.do === 'ready') {
        sim.makeReady();
      } else if (step.do === 'reconcile') {
        const plan = sim.reconcile();
        if (step.steady) {
          if (plan.modifies) throw new Error('a steady round writes something');
          if (Object.values(plan.scaleDiffs).some((n) => n !== 0)) throw new Error('steady, but the Scale diffs are not zero');
          if (plan.updateDiffs && plan.updateDiffs.updateNum !== 0) throw new Error('steady, but updateNum is not zero');
        }
        if (step.inPlace !== undefined) {
          assertSame(step.inPlace, plan.inPlaceUpdate.length, 'pods updated in place');
          inPlace.push(...plan.inPlaceUpdate.map((u) => u.pod));
        }
      } else if (step.do && typeof step.do === 'object' && 'partition' in step.do) {
        // As int_or_str: an integer if the text is one, else the text.
        const text = String(step.do.partition);
        sim.cloneset.spec.updateStrategy.partition = /^[+-]?\d+$/.test(text) ? Number(text) : text;
      } else {
        throw new Error(`unknown step kind ${JSON.stringify(step.do)}`);
      }
      assertSame(step.expect, sim.columns(), 'columns');
      if (step.currentRevision !== undefined) {
        assertSame(step.currentRevision, sim.status().currentRevision, 'currentRevision');
      }
    });
  });
  const after = AFTER_ROLLOUT[doc.name];
  if (after) attempt('after the rollout', () => after(sim.pods, inPlace));
  return { pods: sim.pods, inPlace };
}

/** The scenario-specific checks of cloneset_rollout_table.rs, by scenario name. */
const AFTER_ROLLOUT = {
  'seed-recreate-partition'(pods) {
    // Every surviving pod is a replacement created on revision B.
    const old = pods.map((p) => p.metadata.name).filter((name) => !name.startsWith('demo-new'));
    if (old.length > 0) throw new Error(`pods not replaced: ${old.join(', ')}`);
  },
  'in-place-partition-surge'(pods, inPlace) {
    // One A pod updated in place: the same pod (name, node) now on B.
    assertSame(1, inPlace.length, 'pods updated in place');
    if (!inPlace[0].startsWith('demo-old')) throw new Error(`${inPlace[0]} is not an original pod`);
    const pod = pods.find((p) => p.metadata.name === inPlace[0]);
    if (!pod) throw new Error(`${inPlace[0]} is gone`);
    assertSame(
      ['node-1', 'nginx:1.1', 'demo-bbbbb'],
      [pod.spec.nodeName, pod.spec.containers[0].image, pod.metadata.labels[LABEL_REVISION]],
      'node, image and revision of the pod updated in place',
    );
  },
};

function expectError(f, wanted) {
  let error;
  try {
    f();
  } catch (e) {
    error = e;
  }
  if (error === undefined) throw new Error(`expected an error containing ${JSON.stringify(wanted)}, got a result`);
  if (!(error instanceof Error)) throw new Error(`threw a ${typeof error}, not an Error`);
  if (!error.message.includes(wanted)) {
    throw new Error(`expected an error containing ${JSON.stringify(wanted)}, got: ${error.message}`);
  }
}

function expectExactError(f, message) {
  let error;
  try {
    f();
  } catch (e) {
    error = e;
  }
  if (!(error instanceof Error)) throw new Error(`expected an Error, got ${String(error)}`);
  if (error.message !== message) {
    throw new Error(`expected the message ${JSON.stringify(message)}, got ${JSON.stringify(error.message)}`);
  }
}

const POD = {
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name: 'web-1', labels: { app: 'web' } },
  spec: { containers: [{ name: 'app', image: 'nginx' }] },
};

const SIDECAR_SET = {
  apiVersion: 'apps.kruise.io/v1alpha1',
  kind: 'SidecarSet',
  metadata: { name: 'logs' },
  spec: {
    selector: { matchLabels: { app: 'web' } },
    containers: [{ name: 'log', image: 'busybox' }],
  },
};

const NOW = '2024-05-01T10:00:00Z';

const CLONESET = {
  apiVersion: 'apps.kruise.io/v1alpha1',
  kind: 'CloneSet',
  metadata: { name: 'demo', namespace: 'default' },
  spec: {
    replicas: 2,
    selector: { matchLabels: { app: 'demo' } },
    template: { metadata: { labels: { app: 'demo' } }, spec: { containers: [{ name: 'app', image: 'nginx:1.1' }] } },
    updateStrategy: { type: 'ReCreate', maxSurge: 1, maxUnavailable: 0 },
  },
};

const template = (image) => ({
  metadata: { labels: { app: 'demo' } },
  spec: { containers: [{ name: 'app', image }] },
});

const REVISIONS = {
  current: 'demo-aaaaa',
  update: 'demo-bbbbb',
  templates: { 'demo-aaaaa': template('nginx:1.0'), 'demo-bbbbb': template('nginx:1.1') },
};

/**
 * The API beyond the golden cases: bad input throws an `Error` whose message
 * is the Rust one, and the small helpers behave. Name → check.
 */
export const apiChecks = {
  'a pod without containers throws the injection error'(api) {
    const pod = { ...POD, spec: { containers: [] } };
    expectExactError(
      () => api.injectSidecars({ pod, sidecarSets: [SIDECAR_SET], now: NOW }),
      'pod web-1 has no containers (spec.containers is empty)',
    );
  },
  'a SidecarSet field typo throws, naming the SidecarSet and the field'(api) {
    const typo = { ...SIDECAR_SET, spec: { ...SIDECAR_SET.spec, selectr: {} } };
    expectExactError(
      () => api.injectSidecars({ pod: POD, sidecarSets: [typo], now: NOW }),
      'sidecarSets[0] (logs): unknown field spec.selectr',
    );
    expectExactError(() => api.prepareSidecarSet(typo), 'unknown field spec.selectr');
  },
  'a typo inside a sidecar container throws too'(api) {
    const containers = [{ name: 'log', image: 'busybox', imagePullPolicx: 'Always' }];
    const typo = { ...SIDECAR_SET, spec: { ...SIDECAR_SET.spec, containers } };
    expectExactError(
      () => api.prepareSidecarSet(typo),
      'unknown field spec.containers.0.imagePullPolicx',
    );
  },
  'a Pod given as a SidecarSet throws the type mismatch'(api) {
    expectExactError(
      () => api.prepareSidecarSet(POD),
      'expected apps.kruise.io/v1alpha1 SidecarSet, found v1 Pod',
    );
  },
  'a pod field of the wrong type throws with its path'(api) {
    const pod = { ...POD, spec: { containers: [{ name: 'app', image: 7 }] } };
    expectExactError(
      () => api.normalizePod(pod),
      'pod: spec.containers[0].image: invalid type: integer `7`, expected a string',
    );
  },
  'a request without now throws'(api) {
    expectExactError(
      () => api.injectSidecars({ pod: POD, sidecarSets: [] }),
      'request: missing field `now`',
    );
  },
  'undefined is not a request'(api) {
    expectExactError(() => api.injectSidecars(undefined), 'the request is not a JSON value');
  },
  'an invalid name suffix throws the launch-priority error'(api) {
    const pod = {
      metadata: { generateName: 'web-' },
      spec: {
        containers: [
          { name: 'a', image: 'x' },
          { name: 'b', image: 'x', env: [{ name: 'KRUISE_CONTAINER_PRIORITY', value: '1' }] },
        ],
      },
    };
    expectExactError(
      () => api.applyLaunchPriority(pod, 'aaaaa'),
      'name suffix "aaaaa" must be 5 characters of bcdfghjklmnpqrstvwxz2456789',
    );
    const named = api.applyLaunchPriority(pod, 'b2c4d');
    if (named?.metadata?.name !== 'web-b2c4d') throw new Error('the suffix did not name the pod');
  },
  'injection returns the pod and the applied SidecarSets'(api) {
    const out = api.injectSidecars({ pod: POD, sidecarSets: [SIDECAR_SET], now: NOW });
    assertSame(['logs'], out.sidecarSets, 'sidecarSets');
    assertSame(['log', 'app'], out.pod.spec.containers.map((c) => c.name), 'containers');
    const none = api.injectSidecars({ pod: POD, sidecarSets: [], now: NOW });
    assertSame([], none.sidecarSets, 'sidecarSets without a match');
    assertSame(api.normalizePod(POD), none.pod, 'the pod without a match');
  },
  'jsonPatch lists RFC 6902 operations'(api) {
    assertSame(
      [
        { op: 'replace', path: '/a', value: 2 },
        { op: 'add', path: '/b/1', value: 'x' },
      ],
      api.jsonPatch({ a: 1, b: ['w'] }, { a: 2, b: ['w', 'x'] }),
      'patch',
    );
    assertSame([], api.jsonPatch(POD, POD), 'patch of equal values');
  },
  'planCloneSet returns every key of the plan, even for an empty round'(api) {
    const plan = api.planCloneSet({ cloneset: { ...CLONESET, spec: { ...CLONESET.spec, replicas: 0 } }, pods: [], revisions: REVISIONS, now: NOW });
    const keys = ['stage', 'create', 'delete', 'markSpecifiedDelete', 'lifecycle', 'readiness', 'inPlaceUpdate',
      'inPlaceComplete', 'applyGraced', 'templateHashFix', 'scaleUpLimited', 'errors', 'scaleDiffs',
      'updateDiffs', 'requeueAfterSeconds', 'modifies'];
    assertSame([...keys].sort(), Object.keys(plan).sort(), 'plan keys');
    assertSame('Idle', plan.stage, 'stage');
    assertSame(false, plan.modifies, 'modifies');
    const scaled = api.planCloneSet({ cloneset: CLONESET, pods: [], revisions: REVISIONS, now: NOW });
    assertSame('Scale', scaled.stage, 'stage with no pods');
    assertSame(true, scaled.modifies, 'modifies with no pods');
    if (scaled.create.reduce((n, c) => n + c.count, 0) < 2) throw new Error('creates fewer than 2 pods');
  },
  'planCloneSet errors name the input and the field'(api) {
    const typo = { ...CLONESET, spec: { ...CLONESET.spec, replicaz: 2 } };
    expectExactError(
      () => api.planCloneSet({ cloneset: typo, pods: [], revisions: REVISIONS, now: NOW }),
      'cloneset: unknown field spec.replicaz',
    );
    expectExactError(
      () => api.planCloneSet({ cloneset: CLONESET, pods: [{ ...POD, spec: { containerz: [] } }], revisions: REVISIONS, now: NOW }),
      'pods[0] (web-1): unknown field spec.containerz',
    );
    expectExactError(
      () => api.planCloneSet({ cloneset: CLONESET, pods: [], revisions: REVISIONS }),
      'request: missing field `now`',
    );
    expectExactError(
      () => api.planCloneSet({ cloneset: POD, pods: [], revisions: REVISIONS, now: NOW }),
      'cloneset: expected apps.kruise.io/v1alpha1 CloneSet, found v1 Pod',
    );
    let error;
    try {
      api.planCloneSet({ cloneset: CLONESET, pods: [], revisions: REVISIONS, now: 'yesterday' });
    } catch (e) {
      error = e;
    }
    if (!(error instanceof Error) || !error.message.startsWith('now: ')) {
      throw new Error(`expected an Error starting "now: ", got ${String(error)}`);
    }
  },
  'cloneSetStatus counts the pods'(api) {
    const pod = (name, revision) => ({
      metadata: { name, labels: { app: 'demo', 'controller-revision-hash': revision } },
      spec: { nodeName: 'n1', containers: [{ name: 'app', image: 'nginx:1.0' }] },
      status: { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }] },
    });
    const status = api.cloneSetStatus({
      cloneset: CLONESET,
      pods: [pod('demo-a1', 'demo-aaaaa'), pod('demo-b1', 'demo-bbbbb')],
      revisions: REVISIONS,
      now: NOW,
    });
    const counts = ['replicas', 'readyReplicas', 'updatedReplicas', 'updatedReadyReplicas', 'currentRevision', 'updateRevision'];
    assertSame([2, 2, 1, 1, 'demo-aaaaa', 'demo-bbbbb'], counts.map((k) => status[k]), counts.join(', '));
    expectExactError(
      () => api.cloneSetStatus({ cloneset: CLONESET, pods: [], revisions: REVISIONS, now: NOW, gates: {} }),
      'request: unknown field gates',
    );
  },
  'nameSuffixAlphabet is the one Kubernetes draws from'(api) {
    if (api.nameSuffixAlphabet() !== 'bcdfghjklmnpqrstvwxz2456789') throw new Error('wrong alphabet');
  },
};
