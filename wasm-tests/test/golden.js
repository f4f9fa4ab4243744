// The checks of the golden cases and of the API's errors, shared by the Node
// suite (golden.test.js) and the Chromium one (browser/suite.js), so both run
// exactly the same code. Each check takes the package's exports (`api`) and
// a case already parsed from YAML, and throws an Error saying what is wrong.
//
// They follow the Rust runners, policies/core/tests/golden_injection.rs and
// golden_launch_priority.rs, and the fixture folders' README.md.

import { lineDiffText } from '../playground/linediff.js';

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
  'nameSuffixAlphabet is the one Kubernetes draws from'(api) {
    if (api.nameSuffixAlphabet() !== 'bcdfghjklmnpqrstvwxz2456789') throw new Error('wrong alphabet');
  },
};
