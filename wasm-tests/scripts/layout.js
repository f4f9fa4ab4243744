// Usage: node scripts/layout.js <in.wasm> <out.wasm> (test/layout.test.js
// checks it on a module written by hand).
//
// Renames every function of a module that still has its name section so
// that `wasm-opt --reorder-functions-by-name` lays the code out for gzip:
// functions grouped by what they do (the trait method they implement, or
// their path for a free function), and within a group by their code. The
// package's code is mostly the same few jobs done for hundreds of
// Kubernetes types (read a struct, write it, clone it, drop it); side by
// side, each function finds its near twin within gzip's 32 KB window.
// Measured in README.md ("Size"). Only names change here; wasm-opt moves
// the code and drops the names.
import { readFileSync, writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

function readU32(bytes, at) {
  let value = 0;
  let shift = 0;
  for (;;) {
    const byte = bytes[at++];
    value += (byte & 0x7f) * 2 ** shift;
    shift += 7;
    if (byte < 0x80) return [value, at];
    if (shift > 35) throw new Error(`malformed LEB128 at byte ${at}`);
  }
}

function writeU32(value) {
  const out = [];
  do {
    let byte = value & 0x7f;
    value = Math.floor(value / 128);
    if (value) byte |= 0x80;
    out.push(byte);
  } while (value);
  return Buffer.from(out);
}

function sections(bytes) {
  if (bytes.readUInt32LE(0) !== 0x6d736100) throw new Error('not a wasm module');
  const found = [];
  let at = 8;
  while (at < bytes.length) {
    const id = bytes[at];
    const [size, start] = readU32(bytes, at + 1);
    found.push({ id, from: at, start, end: start + size });
    at = start + size;
  }
  return found;
}

function customName(bytes, section) {
  const [length, at] = readU32(bytes, section.start);
  return [bytes.toString('utf8', at, at + length), at + length];
}

// Function imports come first in the function index space.
function importedFunctions(bytes, section) {
  let [count, at] = readU32(bytes, section.start);
  let functions = 0;
  const skipLimits = () => {
    let flags;
    [flags, at] = readU32(bytes, at);
    [, at] = readU32(bytes, at);
    if (flags & 1) [, at] = readU32(bytes, at);
  };
  while (count--) {
    for (let text = 0; text < 2; text++) {
      const [length, next] = readU32(bytes, at);
      at = next + length;
    }
    const kind = bytes[at++];
    if (kind === 0) {
      functions++;
      [, at] = readU32(bytes, at);
    } else if (kind === 1) {
      at++;
      skipLimits();
    } else if (kind === 2) {
      skipLimits();
    } else if (kind === 3) {
      at += 2;
    } else {
      throw new Error(`import kind ${kind} is not handled`);
    }
  }
  return functions;
}

function functionNames(bytes, section, afterName) {
  const names = new Map();
  let at = afterName;
  while (at < section.end) {
    const kind = bytes[at];
    const [size, start] = readU32(bytes, at + 1);
    if (kind === 1) {
      let [count, cursor] = readU32(bytes, start);
      while (count--) {
        let index;
        let length;
        [index, cursor] = readU32(bytes, cursor);
        [length, cursor] = readU32(bytes, cursor);
        names.set(index, bytes.toString('utf8', cursor, cursor + length));
        cursor += length;
      }
    }
    at = start + size;
  }
  return names;
}

function bodies(bytes, section) {
  let [count, at] = readU32(bytes, section.start);
  const found = [];
  while (count--) {
    const [size, start] = readU32(bytes, at);
    found.push(bytes.subarray(start, start + size));
    at = start + size;
  }
  return found;
}

// `<Volume as core::clone::Clone>::clone::h0123…` -> `core::clone::Clone::clone`;
// `kruise_core::sidecarset::inject::h0123…` -> `kruise_core::sidecarset::inject`.
export function job(name) {
  const plain = name.replace(/::h[0-9a-f]{16}$/, '');
  const implemented = /^<(.*) as (.*)>::([^:]+)$/.exec(plain);
  if (!implemented) return plain;
  return `${implemented[2].split('<')[0]}::${implemented[3]}`;
}

export function layout(bytes) {
  const all = sections(bytes);
  const only = (id) => all.filter((s) => s.id === id);
  const nameSection = all.find((s) => s.id === 0 && customName(bytes, s)[0] === 'name');
  if (!nameSection) throw new Error('the module has no name section (build it with strip = "debuginfo")');
  const imports = only(2).reduce((n, s) => n + importedFunctions(bytes, s), 0);
  const names = functionNames(bytes, nameSection, customName(bytes, nameSection)[1]);
  const code = only(10).flatMap((s) => bodies(bytes, s));

  const defined = code.map((body, k) => ({ index: imports + k, job: job(names.get(imports + k) ?? ''), body }));
  defined.sort((a, b) => (a.job < b.job ? -1 : a.job > b.job ? 1 : Buffer.compare(a.body, b.body)));
  const width = String(defined.length).length;
  const renamed = new Map([...names].filter(([index]) => index < imports));
  defined.forEach((f, rank) => renamed.set(f.index, `f${String(rank).padStart(width, '0')}`));

  const entries = [...renamed].sort(([a], [b]) => a - b).map(([index, name]) => {
    const text = Buffer.from(name, 'utf8');
    return Buffer.concat([writeU32(index), writeU32(text.length), text]);
  });
  const subsection = Buffer.concat([writeU32(entries.length), ...entries]);
  const payload = Buffer.concat([
    writeU32(4), Buffer.from('name'), Buffer.from([1]), writeU32(subsection.length), subsection,
  ]);
  const parts = [bytes.subarray(0, 8)];
  for (const s of all) {
    if (s === nameSection) parts.push(Buffer.from([0]), writeU32(payload.length), payload);
    else if (s.id !== 0) parts.push(bytes.subarray(s.from, s.end));
  }
  return Buffer.concat(parts);
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [input, output] = process.argv.slice(2);
  if (!input || !output) {
    console.error('usage: node scripts/layout.js <in.wasm> <out.wasm>');
    process.exit(2);
  }
  writeFileSync(output, layout(readFileSync(input)));
}
