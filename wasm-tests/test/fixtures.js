// Where the shared golden cases live, and which files are cases.
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The repository root: the static server serves some of it to Chromium. */
export const REPO = fileURLToPath(new URL('../../', import.meta.url));

/** The fixture folders the suites run, relative to the repository root. */
export const SUITES = {
  injection: 'policies/fixtures/injection',
  'launch-priority': 'policies/fixtures/launch-priority',
  'cloneset-rollout': 'policies/fixtures/cloneset',
};

/** Files of a suite's folder that are not its cases. */
const NOT_CASES = { 'cloneset-rollout': ['planner-cases.yaml', 'validation.yaml'] };

/** The case files of a suite, sorted: every `*.yaml` of its folder. */
export function caseFiles(suite) {
  return readdirSync(new URL(`../../${SUITES[suite]}/`, import.meta.url))
    .filter((name) => name.endsWith('.yaml') && !(NOT_CASES[suite] ?? []).includes(name))
    .sort();
}

/**
 * Files that hold a list of cases (`cases:`), relative to the repository
 * root, and how many cases each must have at least (as its Rust runner).
 */
export const CASE_LISTS = {
  'cloneset-planner': { file: 'policies/fixtures/cloneset/planner-cases.yaml', minimum: 5 },
};
