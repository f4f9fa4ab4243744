// scripts/layout.js on a module written here byte by byte: which order it
// asks for, and that it changes nothing but the names.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { job, layout } from '../scripts/layout.js';

const u32 = (n) => {
  const out = [];
  do {
    out.push((n & 0x7f) | (n > 0x7f ? 0x80 : 0));
    n >>>= 7;
  } while (n);
  return out;
};
const text = (s) => [...u32(Buffer.byteLength(s)), ...Buffer.from(s)];
const vec = (items) => [...u32(items.length), ...items.flat()];
const section = (id, bytes) => [id, ...u32(bytes.length), ...bytes];

const HASH = '::h0123456789abcdef';
// One import, then three functions: their names and bodies (no locals).
// Sorted by name they would be Big, Small, alloc::run; by job and code
// they are alloc::run, then the clones with Small's code first.
const DEFINED = [
  { name: `alloc::run${HASH}`, body: [0x00, 0x01, 0x0b] },
  { name: `<Big as core::clone::Clone>::clone${HASH}`, body: [0x00, 0x0b] },
  { name: `<Small as core::clone::Clone>::clone${HASH}`, body: [0x00, 0x01, 0x01, 0x0b] },
];

function module({ withNames = true } = {}) {
  const names = [[0, 'imported'], ...DEFINED.map((f, k) => [k + 1, f.name])];
  const nameSection = [
    ...text('name'),
    ...section(1, vec(names.map(([index, name]) => [...u32(index), ...text(name)]))),
  ];
  return Buffer.from([
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
    ...section(1, vec([[0x60, 0x00, 0x00]])),
    ...section(2, vec([[...text('env'), ...text('imported'), 0x00, 0x00]])),
    ...section(3, vec(DEFINED.map(() => [0x00]))),
    ...section(10, vec(DEFINED.map((f) => [...u32(f.body.length), ...f.body]))),
    ...(withNames ? section(0, nameSection) : []),
  ]);
}

// The function names of a module's name section, by index.
function namesOf(bytes) {
  const at = bytes.lastIndexOf(Buffer.from('\x04name'));
  assert.ok(at > 0, 'a name section');
  let cursor = at + 5 + 2; // past "name", the subsection id and its size (< 128)
  const names = new Map();
  let count = bytes[cursor++];
  while (count--) {
    const index = bytes[cursor++];
    const length = bytes[cursor++];
    names.set(index, bytes.toString('utf8', cursor, cursor + length));
    cursor += length;
  }
  return names;
}

test('a function is known by the trait method it implements, or by its path', () => {
  assert.equal(job(`<Big as core::clone::Clone>::clone${HASH}`), 'core::clone::Clone::clone');
  assert.equal(
    job(`<alloc::vec::Vec<T> as serde::Deserialize<'de>>::deserialize${HASH}`),
    'serde::Deserialize::deserialize',
  );
  assert.equal(
    job(`<<Pod as serde::Deserialize>::deserialize::Visitor as serde::de::Visitor>::visit_map${HASH}`),
    'serde::de::Visitor::visit_map',
  );
  assert.equal(job(`kruise_core::sidecarset::inject${HASH}`), 'kruise_core::sidecarset::inject');
});

test('functions are renamed in the order of their job, then their code', () => {
  const names = namesOf(layout(module()));
  // alloc::run, then the clones by their bytes (Small's 0x01 before Big's 0x0b).
  assert.deepEqual([...names], [[0, 'imported'], [1, 'f0'], [2, 'f2'], [3, 'f1']]);
});

test('everything but the name section is left as it was', () => {
  const before = module();
  const withoutNames = module({ withNames: false });
  const after = layout(before);
  assert.deepEqual(after.subarray(0, withoutNames.length), withoutNames);
  assert.notDeepEqual(after, before);
});

test('a module without names is refused with the reason', () => {
  assert.throws(() => layout(module({ withNames: false })), /no name section/);
});
