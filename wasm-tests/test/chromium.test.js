// The Chromium half: the golden suite against the web build in headless
// Chromium (Debian's package, driven by playwright-core), one Node test per
// case, and a click through the playground that saves a screenshot.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { chromium } from 'playwright-core';

import { CASE_LISTS, SUITES, caseFiles } from './fixtures.js';
import { startServer } from './server.js';

const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  // Containers often have a small /dev/shm.
  '--disable-dev-shm-usage',
];
const SCREENSHOT = fileURLToPath(new URL('../playground-screenshot.png', import.meta.url));

let server;
let context;
let userDataDir;

before(async () => {
  server = await startServer();
  userDataDir = mkdtempSync(join(tmpdir(), 'kruise-wasm-chromium-'));
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: ARGS,
    viewport: { width: 1440, height: 1000 },
  });
  // Only our server may be reached: anything else is refused at once.
  await context.route((url) => url.origin !== server.url, (route) => route.abort());
});

after(async () => {
  await context?.close();
  await server?.close();
  if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
});

/** A page that fails the test on an uncaught error or a console error. */
async function openPage(path) {
  const page = await context.newPage();
  const problems = [];
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('console', (message) => {
    if (message.type() === 'error') problems.push(`console error: ${message.text()}`);
  });
  await page.goto(`${server.url}${path}`);
  return { page, problems };
}

test('golden suite in Chromium', async (t) => {
  const { page, problems } = await openPage('/wasm-tests/test/browser/index.html');
  await page.waitForFunction(() => typeof window.runSuite === 'function');
  const suites = Object.fromEntries(
    Object.keys(SUITES).map((suite) => [suite, { folder: SUITES[suite], files: caseFiles(suite) }]),
  );
  const results = await page.evaluate(([s, l]) => window.runSuite(s, l), [suites, CASE_LISTS]);
  const expected = Object.values(suites).reduce((n, s) => n + s.files.length, 0);
  assert.ok(results.length > expected, `only ${results.length} results`);
  for (const { name, ok, message } of results) {
    await t.test(`chromium: ${name}`, () => assert.ok(ok, message));
  }
  assert.deepEqual(problems, []);
  await page.close();
});

test('playground: pick an example, inject, see the sidecar, the diff and the patch', async () => {
  const { page, problems } = await openPage('/wasm-tests/playground/');
  await page.waitForSelector('#inject:enabled');
  await page.selectOption('#example', 'scs-demo');
  await page.waitForFunction(() => document.querySelector('#pod').value.includes('test-pod'));
  await page.click('#inject');
  assert.equal(await page.textContent('#status'), 'Applied SidecarSet scs-demo.');
  const injected = await page.textContent('#injected');
  assert.match(injected, /name: sidecar1/);
  assert.match(injected, /IS_INJECTED/);
  assert.match(await page.textContent('#diff'), /^\+ .*name: sidecar1$/m);
  const patch = JSON.parse(await page.textContent('#patch'));
  assert.ok(patch.some((op) => op.path.startsWith('/spec/containers/') && JSON.stringify(op.value).includes('sidecar1')));

  // A pasted pod that no SidecarSet selects comes back unchanged.
  await page.fill('#pod', 'metadata: {name: lonely}\nspec: {containers: [{name: app, image: nginx}]}\n');
  await page.click('#inject');
  assert.equal(await page.textContent('#status'), 'No SidecarSet selects this pod: it is admitted as it is.');
  assert.equal(await page.textContent('#patch'), '[]');

  // Errors from the Rust side are shown as they are.
  await page.selectOption('#example', 'conflict');
  await page.waitForFunction(() => document.querySelector('#sidecarsets').value.includes('test-sidecarset'));
  await page.click('#inject');
  assert.match(await page.textContent('#status'), /would be injected by both SidecarSet scs-demo and SidecarSet test-sidecarset/);
  assert.equal(await page.getAttribute('#status', 'data-state'), 'error');

  // Launch priority after injection: the Ordered example gates both containers.
  await page.selectOption('#example', 'ordered');
  await page.waitForFunction(() => document.querySelector('#pod').value.includes('name: ordered'));
  assert.ok(await page.isChecked('#launch-priority'));
  await page.click('#inject');
  assert.equal(
    await page.textContent('#status'),
    'No SidecarSet selects this pod: it is admitted as it is. Launch priority: the containers wait on ConfigMap ordered-barrier.',
  );
  assert.match(await page.textContent('#injected'), /KRUISE_CONTAINER_BARRIER/);

  // The screenshot shows the first example.
  await page.selectOption('#example', 'scs-demo');
  await page.waitForFunction(() => document.querySelector('#pod').value.includes('test-pod'));
  await page.click('#inject');
  assert.equal(await page.textContent('#status'), 'Applied SidecarSet scs-demo.');
  await page.screenshot({ path: SCREENSHOT, fullPage: true });
  assert.deepEqual(problems, []);
  await page.close();
});

test('playground: the CloneSet rollout table, partition 3 then 0', async () => {
  const { page, problems } = await openPage('/wasm-tests/playground/');
  await page.waitForSelector('#rollout:enabled');
  const lastRow = () =>
    page.$$eval('#rollout-table tr', (rows) => [...rows.at(-1).cells].map((c) => c.textContent));
  // step, round, desired, updated, updatedReady, ready, total, old, new, writes
  await page.click('#rollout');
  assert.match(await page.textContent('#rollout-status'), /^Steady after \d+ writing rounds\.$/);
  assert.deepEqual((await lastRow()).slice(1, 9), ['done', '5', '2', '2', '5', '5', '3', '2']);
  assert.match(await page.textContent('#rollout-table'), /create 1 on demo-bbbbb/);
  await page.fill('#rollout-partition', '0');
  await page.click('#rollout');
  assert.deepEqual((await lastRow()).slice(1, 9), ['done', '5', '5', '5', '5', '5', '0', '5']);
  await page.selectOption('#rollout-type', 'InPlaceIfPossible');
  await page.click('#rollout');
  assert.deepEqual((await lastRow()).slice(1, 9), ['done', '5', '5', '5', '5', '5', '0', '5']);
  assert.match(await page.textContent('#rollout-table'), /in place to demo-bbbbb/);
  // Errors from the Rust side are shown.
  await page.fill('#rollout-replicas', '1.5');
  await page.click('#rollout');
  assert.equal(await page.getAttribute('#rollout-status', 'data-state'), 'error');
  assert.match(await page.textContent('#rollout-status'), /^cloneset: spec\.replicas: invalid type/);
  assert.deepEqual(problems, []);
  await page.close();
});
