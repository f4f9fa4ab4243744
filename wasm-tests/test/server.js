// A static file server on 127.0.0.1 for Chromium: the package, the test
// pages, the playground and the shared fixtures, read from the repository.
// Run directly (`npm run playground`) it serves the playground until stopped.
import { createReadStream, statSync } from 'node:fs';
import { createServer } from 'node:http';
import { extname, join, normalize } from 'node:path';
import { pathToFileURL } from 'node:url';

import { REPO } from './fixtures.js';

/** Only these parts of the repository are served. */
const SERVED = ['/wasm-tests/', '/policies/fixtures/'];

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json',
  '.wasm': 'application/wasm',
  '.yaml': 'text/plain; charset=utf-8',
  '.md': 'text/plain; charset=utf-8',
  '.ts': 'text/plain; charset=utf-8',
  '.png': 'image/png',
};

/** Starts the server on a free port; resolves to `{url, close}`. */
export function startServer({ port = 0 } = {}) {
  const server = createServer((request, response) => {
    const path = normalize(decodeURIComponent(new URL(request.url, 'http://x').pathname));
    if (path === '/') {
      response.writeHead(302, { location: '/wasm-tests/playground/' }).end();
      return;
    }
    const file = join(REPO, path.endsWith('/') ? `${path}index.html` : path);
    let size;
    try {
      if (!SERVED.some((prefix) => path.startsWith(prefix)) || path.includes('..')) throw new Error();
      const stat = statSync(file);
      if (!stat.isFile()) throw new Error();
      size = stat.size;
    } catch {
      response.writeHead(404, { 'content-type': 'text/plain' }).end(`not found: ${path}\n`);
      return;
    }
    response.writeHead(200, {
      'content-type': TYPES[extname(file)] ?? 'application/octet-stream',
      'content-length': size,
      'cache-control': 'no-store',
    });
    createReadStream(file).pipe(response);
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      const url = `http://127.0.0.1:${server.address().port}`;
      resolve({ url, close: () => new Promise((done) => server.close(done)) });
    });
  });
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const { url } = await startServer({ port: Number(process.env.PORT ?? 8080) });
  console.log(`playground: ${url}/wasm-tests/playground/ (Ctrl-C stops)`);
}
