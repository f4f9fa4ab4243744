// The golden suite in the browser: the same checks as golden.test.js, run
// against the web build (pkg/web). The Node side (chromium.test.js) calls
// `runSuite` with the case files to run and turns each result into a test.
import init, * as api from '../../pkg/web/kruise_wasm_js.js';
import YAML from '../../node_modules/yaml/browser/index.js';
import {
  apiChecks,
  casesOf,
  checkCloneSetPlanCase,
  checkCloneSetRollout,
  checkInjectionCase,
  checkLaunchPriorityCase,
} from '../golden.js';

const checks = {
  injection: checkInjectionCase,
  'launch-priority': checkLaunchPriorityCase,
  'cloneset-rollout': checkCloneSetRollout,
};
const listChecks = { 'cloneset-planner': checkCloneSetPlanCase };

/**
 * @param {{[suite: string]: {folder: string, files: string[]}}} suites
 * @param {{[suite: string]: {file: string, minimum: number}}} lists files of many cases each
 * @returns {Promise<{name: string, ok: boolean, message?: string}[]>}
 */
async function runSuite(suites, lists = {}) {
  await init();
  const results = [];
  const record = async (name, run) => {
    try {
      await run();
      results.push({ name, ok: true });
    } catch (error) {
      results.push({ name, ok: false, message: String(error?.message ?? error) });
    }
  };
  for (const [suite, { folder, files }] of Object.entries(suites)) {
    for (const file of files) {
      await record(`${suite}/${file}`, async () => {
        const response = await fetch(`/${folder}/${file}`);
        if (!response.ok) throw new Error(`fetching ${file}: HTTP ${response.status}`);
        checks[suite](api, YAML.parse(await response.text()));
      });
    }
  }
  for (const [suite, { file, minimum }] of Object.entries(lists)) {
    let cases = [];
    await record(`${suite}/at least ${minimum} cases`, async () => {
      const response = await fetch(`/${file}`);
      if (!response.ok) throw new Error(`fetching ${file}: HTTP ${response.status}`);
      cases = casesOf(YAML.parse(await response.text()));
      if (cases.length < minimum) throw new Error(`only ${cases.length} cases`);
    });
    for (const [index, doc] of cases.entries()) {
      await record(`${suite}/${index}: ${doc?.name}`, () => listChecks[suite](api, doc));
    }
  }
  for (const [name, check] of Object.entries(apiChecks)) {
    await record(`API/${name}`, () => check(api));
  }
  const failed = results.filter((r) => !r.ok).length;
  document.getElementById('status').textContent = `${results.length - failed} passed, ${failed} failed`;
  return results;
}

window.runSuite = runSuite;
document.getElementById('status').textContent = 'ready';
