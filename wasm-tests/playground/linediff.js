// A line diff (longest common subsequence), used by the playground to show
// what injection changed and by the tests to explain a mismatch.

/**
 * @param {string} before
 * @param {string} after
 * @returns {{kind: ' ' | '-' | '+', line: string}[]}
 */
export function lineDiff(before, after) {
  const a = before.split('\n');
  const b = after.split('\n');
  // lcs[i][j]: the longest common subsequence of a[i..] and b[j..].
  const lcs = Array.from({ length: a.length + 1 }, () => new Uint32Array(b.length + 1));
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    if (i < a.length && j < b.length && a[i] === b[j]) {
      out.push({ kind: ' ', line: a[i] });
      i++;
      j++;
    } else if (i < a.length && (j === b.length || lcs[i + 1][j] >= lcs[i][j + 1])) {
      out.push({ kind: '-', line: a[i++] });
    } else {
      out.push({ kind: '+', line: b[j++] });
    }
  }
  return out;
}

/** The diff as text, `-` for `before` and `+` for `after`. */
export function lineDiffText(before, after) {
  return lineDiff(before, after)
    .map(({ kind, line }) => `${kind} ${line}`)
    .join('\n');
}
