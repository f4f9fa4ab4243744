// The golden suite in the browser: the same checks as golden.test.js, run
// against the web build (pkg/web). The Node side (chromium.test.js) calls
// `runSuite` with the case files to run and turns each result into a test.
import init, * as api from '../../pkg/web/kruise_wasm_js.js';
import YAML from '../../node_modules/yaml/browser/index.js';
import { apiChecks, checkInjectionCase, checkLaunchPriorityCase } from '../golden.js';

const checks = { injection: checkInjectionCase, 'launch-priority': checkLaunchPriorityCase };

/**
 * @param {{[suite: string]: {folder: string, files: string[]}}} suites
 * @returns {Promise<{name: string, ok: boolean, message?: string}[]>}
 */
async function runSuite(suites) {
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
  for (const [name, check] of Object.entries(apiChecks)) {
    await record(`API/${name}`, () => check(api));
  }
  const failed = results.filter((r) => !r.ok).length;
  document.getElementById('status').textContent = `${results.length - failed} passed, ${failed} failed`;
  return results;
}

window.runSuite = runSuite;
document.getElementById('status').textContent = 'ready';
