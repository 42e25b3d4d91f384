// Bundles the extension with esbuild (vscode-languageclient included) and the graph view's webview code (elkjs
// included: the webview loads nothing else); --tests also compiles unit tests.
import * as esbuild from 'esbuild';
import { copyFileSync, readdirSync, readFileSync } from 'node:fs';

/** ELK's worker script as a string in the view's bundle: the view starts it from a blob: URL (it loads nothing). */
const workerAsText = {
  name: 'elk-worker-as-text',
  setup(build) {
    const text = (args) => ({ contents: readFileSync(args.path, 'utf8'), loader: 'text' });
    build.onLoad({ filter: /elk-worker\.min\.js$/ }, text);
  },
};

const production = process.argv.includes('--production');
await esbuild.build({
  entryPoints: ['src/extension.ts'],
  bundle: true,
  outfile: 'dist/extension.js',
  external: ['vscode'],
  platform: 'node',
  format: 'cjs',
  target: 'node20',
  sourcemap: !production,
  minify: production,
});
await esbuild.build({
  entryPoints: ['webview/graph/main.ts', 'webview/graph/graph.css'],
  bundle: true,
  entryNames: 'graph',
  outdir: 'dist/webview',
  platform: 'browser',
  format: 'iife',
  target: 'chrome120',
  minify: true, // elkjs is most of it
  plugins: [workerAsText],
});
copyFileSync('node_modules/elkjs/LICENSE.md', 'dist/webview/elkjs-LICENSE.md'); // EPL-2.0: its notice ships with the bundle
if (process.argv.includes('--tests')) {
  const tests = readdirSync('test/unit').filter((f) => f.endsWith('.test.ts')).map((f) => `test/unit/${f}`);
  await esbuild.build({ entryPoints: tests, bundle: true, outdir: 'out/test/unit', platform: 'node', format: 'cjs', target: 'node20', external: ['vscode'] });
}
