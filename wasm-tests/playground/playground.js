// The playground: parse what was pasted, run the package's injection (and
// launch priority if asked), show the result, a diff and the JSON patch.
import init, {
  applyLaunchPriority,
  cloneSetStatus,
  planCloneSet,
  injectSidecars,
  jsonPatch,
  nameSuffixAlphabet,
  normalizePod,
} from '../pkg/web/kruise_wasm_js.js';
import YAML from '../node_modules/yaml/browser/index.js';
import { lineDiff } from './linediff.js';
import { RolloutSim } from './rollout.js';

/** Pod + SidecarSet pairs from policies/fixtures/examples. */
const EXAMPLES = [
  { id: 'scs-demo', title: 'scs-demo → test-pod: a sidecar and its volume', pod: 'pod-test-pod.yaml', sidecarSets: ['sidecarset-scs-demo.yaml'] },
  { id: 'log-sidecar', title: "log-sidecar → app-a: the pod's own log-volume wins", pod: 'pod-app-a.yaml', sidecarSets: ['sidecarset-log-sidecar.yaml'] },
  { id: 'extended-fields', title: 'extended fields → sample: shared volumes, transferEnv', pod: 'pod-sample-main.yaml', sidecarSets: ['sidecarset-extended-fields.yaml'] },
  { id: 'canary', title: 'canary → a pod of the nginx Deployment', pod: 'deployment-nginx.yaml', sidecarSets: ['sidecarset-canary.yaml'] },
  { id: 'hotupgrade', title: 'hot upgrade → a pod of the busybox CloneSet', pod: 'cloneset-hotupgrade.yaml', sidecarSets: ['sidecarset-hotupgrade.yaml'] },
  { id: 'conflict', title: 'scs-demo and canary both inject sidecar1: refused', pod: 'pod-test-pod.yaml', sidecarSets: ['sidecarset-scs-demo.yaml', 'sidecarset-canary.yaml'] },
  { id: 'ordered', title: 'launch priority: Ordered', pod: 'pod-launch-ordered.yaml', sidecarSets: [], launchPriority: true },
  { id: 'priority-env', title: 'launch priority: KRUISE_CONTAINER_PRIORITY', pod: 'pod-launch-priority-env.yaml', sidecarSets: [], launchPriority: true },
];
const EXAMPLES_URL = new URL('../../policies/fixtures/examples/', import.meta.url);

const $ = (id) => document.getElementById(id);

function setStatus(state, text) {
  $('status').dataset.state = state;
  $('status').textContent = text;
}

async function loadExample(id) {
  const example = EXAMPLES.find((e) => e.id === id);
  if (!example) return;
  const fetchText = async (file) => {
    const response = await fetch(new URL(file, EXAMPLES_URL));
    if (!response.ok) throw new Error(`${file}: HTTP ${response.status}`);
    return (await response.text()).trimEnd();
  };
  const [pod, ...sidecarSets] = await Promise.all([example.pod, ...example.sidecarSets].map(fetchText));
  $('pod').value = `${pod}\n`;
  $('sidecarsets').value = sidecarSets.length ? `${sidecarSets.join('\n---\n')}\n` : '';
  $('launch-priority').checked = Boolean(example.launchPriority);
  setStatus('idle', `Loaded ${example.pod}${sidecarSets.length ? ` and ${example.sidecarSets.join(', ')}` : ''}. Press Inject.`);
}

/** YAML documents of a text area, skipping empty ones. */
function documents(text, what) {
  return YAML.parseAllDocuments(text)
    .map((doc) => {
      if (doc.errors.length > 0) throw new Error(`${what}: ${doc.errors[0].message}`);
      return doc.toJS();
    })
    .filter((value) => value !== null && value !== undefined);
}

/** A pod, or a new pod of a workload's template (named by generateName). */
function podOf(doc) {
  const template = doc?.spec?.template;
  if (doc?.kind && doc.kind !== 'Pod' && template) {
    return {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: {
        ...template.metadata,
        generateName: `${doc.metadata?.name ?? 'pod'}-`,
        ...(doc.metadata?.namespace ? { namespace: doc.metadata.namespace } : {}),
      },
      spec: template.spec,
    };
  }
  return doc;
}

/** 5 characters as Kubernetes appends to a generateName. */
function randomSuffix() {
  const alphabet = nameSuffixAlphabet();
  const draws = crypto.getRandomValues(new Uint32Array(5));
  return Array.from(draws, (n) => alphabet[n % alphabet.length]).join('');
}

function show(before, after) {
  const [beforeYaml, afterYaml] = [before, after].map((pod) => YAML.stringify(pod));
  $('injected').textContent = afterYaml;
  const diff = $('diff');
  diff.replaceChildren(
    ...lineDiff(beforeYaml.trimEnd(), afterYaml.trimEnd()).map(({ kind, line }) => {
      const span = document.createElement('span');
      span.className = { '+': 'add', '-': 'del', ' ': 'same' }[kind];
      span.textContent = `${kind} ${line}\n`;
      return span;
    }),
  );
  $('patch').textContent = JSON.stringify(jsonPatch(before, after), null, 2);
}

function inject() {
  try {
    const pods = documents($('pod').value, 'Pod');
    if (pods.length !== 1) throw new Error(`Pod: expected one document, found ${pods.length}`);
    const pod = normalizePod(podOf(pods[0]));
    const request = {
      pod,
      sidecarSets: documents($('sidecarsets').value, 'SidecarSets'),
      now: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
    };
    const labels = $('namespace-labels').value.trim();
    if (labels) request.namespaceLabels = YAML.parse(labels);
    const injection = injectSidecars(request);
    const names = injection.sidecarSets;
    const notes = [
      names.length === 0
        ? 'No SidecarSet selects this pod: it is admitted as it is.'
        : `Applied SidecarSet${names.length > 1 ? 's' : ''} ${names.join(', ')}.`,
    ];
    let result = injection.pod;
    if ($('launch-priority').checked) {
      const gated = applyLaunchPriority(result, randomSuffix());
      if (gated) {
        result = gated;
        notes.push(`Launch priority: the containers wait on ConfigMap ${gated.metadata.name}-barrier.`);
      } else {
        notes.push('Launch priority: nothing to order.');
      }
    }
    show(pod, result);
    setStatus('ok', notes.join(' '));
  } catch (error) {
    for (const id of ['injected', 'diff', 'patch']) $(id).textContent = '';
    setStatus('error', error.message);
  }
}

/** A number if the text is an integer, else the text (an IntOrString). */
const intOrString = (text) => (/^\s*-?\d+\s*$/.test(text) ? Number(text) : text.trim());

const COLUMNS = ['desired', 'updated', 'updatedReady', 'ready', 'total', 'old', 'new'];

/** What a plan writes, in a few words. */
function summarize(plan) {
  const parts = [];
  for (const { revision, count } of plan.create) parts.push(`create ${count} on ${revision}`);
  if (plan.delete.length) parts.push(`delete ${plan.delete.join(', ')}`);
  if (plan.markSpecifiedDelete.length) parts.push(`mark for deletion ${plan.markSpecifiedDelete.join(', ')}`);
  for (const { pod, revision } of plan.inPlaceUpdate) parts.push(`update ${pod} in place to ${revision}`);
  for (const { pod, to } of plan.lifecycle) parts.push(`${pod} → ${to}`);
  if (plan.inPlaceComplete.length) parts.push(`in-place done: ${plan.inPlaceComplete.map((c) => c.pod).join(', ')}`);
  return `${plan.stage}${parts.length ? `: ${parts.join('; ')}` : ''}`;
}

/**
 * Runs the rollout: reconcile while rounds write; when one writes nothing,
 * the pods become Ready (a row `E`); stop when that changes nothing either.
 */
function rollout() {
  const table = $('rollout-table');
  table.textContent = '';
  try {
    const template = (image) => ({ metadata: { labels: { app: 'demo' } }, spec: { containers: [{ name: 'app', image }] } });
    const cloneset = {
      apiVersion: 'apps.kruise.io/v1alpha1',
      kind: 'CloneSet',
      metadata: { name: 'demo', namespace: 'default', generation: 2 },
      spec: {
        replicas: Number($('rollout-replicas').value),
        selector: { matchLabels: { app: 'demo' } },
        template: template('nginx:1.1'),
        updateStrategy: {
          type: $('rollout-type').value,
          partition: intOrString($('rollout-partition').value),
          maxSurge: intOrString($('rollout-max-surge').value),
          maxUnavailable: intOrString($('rollout-max-unavailable').value),
        },
      },
    };
    const revisions = {
      current: 'demo-aaaaa',
      update: 'demo-bbbbb',
      templates: { 'demo-aaaaa': template('nginx:1.0'), 'demo-bbbbb': template('nginx:1.1') },
    };
    const api = { planCloneSet, cloneSetStatus };
    const sim = new RolloutSim(api, cloneset, revisions, { count: cloneset.spec.replicas, revision: 'demo-aaaaa' });
    const head = table.insertRow();
    for (const text of ['step', 'round', ...COLUMNS, 'writes']) head.appendChild(document.createElement('th')).textContent = text;
    const row = (step, round, writes) => {
      const tr = table.insertRow();
      const columns = sim.columns();
      for (const text of [step, round, ...COLUMNS.map((c) => columns[c]), writes]) tr.insertCell().textContent = String(text);
    };
    row(0, 'start', '');
    let reconciles = 0;
    for (let step = 1; step <= 200; step++) {
      const plan = sim.reconcile();
      if (plan.modifies) {
        reconciles += 1;
        row(step, `R${reconciles}`, summarize(plan));
        continue;
      }
      const before = JSON.stringify(sim.pods);
      sim.makeReady();
      if (JSON.stringify(sim.pods) === before) {
        row(step, 'done', summarize(plan));
        $('rollout-status').dataset.state = 'ok';
        $('rollout-status').textContent = `Steady after ${reconciles} writing rounds.`;
        return;
      }
      row(step, 'E', 'the pods become Ready');
    }
    throw new Error('no steady state after 200 steps');
  } catch (error) {
    $('rollout-status').dataset.state = 'error';
    $('rollout-status').textContent = error.message;
  }
}

for (const { id, title } of EXAMPLES) $('example').add(new Option(title, id));
$('example').addEventListener('change', (event) =>
  loadExample(event.target.value).catch((error) => setStatus('error', error.message)),
);
$('inject').addEventListener('click', inject);
$('rollout').addEventListener('click', rollout);

await init();
$('inject').disabled = false;
$('rollout').disabled = false;
setStatus('idle', 'Choose an example or paste a pod and SidecarSets, then press Inject.');
