import * as assert from 'node:assert/strict';
import { test } from 'node:test';

import { targetAt } from '../../src/targets';

// Lenses on the decorator lines: `first` decorated on line 4 (def on 5, body to 7), `second` on 10.
const targets = [{ name: 'second', line: 10 }, { name: 'first', line: 4 }, { name: 'first', line: 4 }];

test('the target whose decorator is at or above the cursor, as the server picks it', () => {
  assert.equal(targetAt(targets, 4), 'first'); // on the decorator
  assert.equal(targetAt(targets, 6), 'first'); // in the body
  assert.equal(targetAt(targets, 9), 'first'); // below the function: the nearest above
  assert.equal(targetAt(targets, 10), 'second');
  assert.equal(targetAt(targets, 40), 'second');
});

test('above every target: the first; no targets: none', () => {
  assert.equal(targetAt(targets, 0), 'first');
  assert.equal(targetAt([], 3), undefined);
});
