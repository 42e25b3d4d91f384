// Bundles the extension with esbuild (vscode-languageclient included); --tests also compiles unit tests.
import * as esbuild from 'esbuild';
import { readdirSync } from 'node:fs';

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
if (process.argv.includes('--tests')) {
  const tests = readdirSync('test/unit').filter((f) => f.endsWith('.test.ts')).map((f) => `test/unit/${f}`);
  await esbuild.build({ entryPoints: tests, bundle: true, outdir: 'out/test/unit', platform: 'node', format: 'cjs', target: 'node20', external: ['vscode'] });
}
