// The golden cases and the API checks against the Node build (pkg/node).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import YAML from 'yaml';

import { CASE_LISTS, REPO, SUITES, caseFiles } from './fixtures.js';
import {
  apiChecks,
  casesOf,
  checkCloneSetPlanCase,
  checkCloneSetRollout,
  checkInjectionCase,
  checkLaunchPriorityCase,
} from './golden.js';

const api = createRequire(import.meta.url)('../pkg/node/kruise_wasm_js.js');

const checks = {
  injection: checkInjectionCase,
  'launch-priority': checkLaunchPriorityCase,
  'cloneset-rollout': checkCloneSetRollout,
};
// The Rust runners insist on as many, so an emptied folder cannot pass.
const minimum = { injection: 30, 'launch-priority': 10, 'cloneset-rollout': 2 };

for (const [suite, check] of Object.entries(checks)) {
  describe(`${suite} golden cases`, () => {
    const files = caseFiles(suite);
    test(`at least ${minimum[suite]} cases`, () => assert.ok(files.length >= minimum[suite]));
    for (const file of files) {
      test(file, () => {
        const text = readFileSync(join(REPO, SUITES[suite], file), 'utf8');
        check(api, YAML.parse(text));
      });
    }
  });
}

const listChecks = { 'cloneset-planner': checkCloneSetPlanCase };

for (const [suite, check] of Object.entries(listChecks)) {
  const { file, minimum: least } = CASE_LISTS[suite];
  describe(`${suite} cases (${file})`, () => {
    const cases = casesOf(YAML.parse(readFileSync(join(REPO, file), 'utf8')));
    test(`at least ${least} cases`, () => assert.ok(cases.length >= least));
    for (const [index, doc] of cases.entries()) {
      test(`${index}: ${doc?.name}`, () => check(api, doc));
    }
  });
}

describe('API', () => {
  for (const [name, check] of Object.entries(apiChecks)) test(name, () => check(api));
});
