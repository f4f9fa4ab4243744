// Prints the version of the wasm-bindgen crate locked in the workspace's
// Cargo.lock: wasm-bindgen-cli must be exactly that version.
import { readFileSync } from 'node:fs';

const lock = readFileSync(new URL('../../Cargo.lock', import.meta.url), 'utf8');
const match = lock.match(/\[\[package\]\]\nname = "wasm-bindgen"\nversion = "([^"]+)"/);
if (!match) {
  console.error('wasm-bindgen is not in Cargo.lock');
  process.exit(1);
}
console.log(match[1]);
