import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { anchorOf, headingLines, localRuleLink } from '../../src/rulesDoc';

const RULES = readFileSync(`${__dirname}/../../../../docs/rules.md`, 'utf8');

test('anchors are spelled as GitHub spells them', () => {
  assert.equal(anchorOf('FXE0011 no-symbolic-function-for-call-function'), 'fxe0011-no-symbolic-function-for-call-function');
  assert.equal(anchorOf('What "located" means?'), 'what-located-means');
});

test('a rule link opens the shipped page at the rule heading', () => {
  const lines = headingLines(RULES);
  const line = RULES.split('\n').indexOf('## FXE0017 fx-graph-capture') + 1;
  assert.ok(line > 0);
  const href = 'https://github.com/onnxlens/onnxlens/blob/main/docs/rules.md#fxe0017-fx-graph-capture';
  assert.equal(localRuleLink(href, 'file:///ext/docs/rules.md', lines), `file:///ext/docs/rules.md#L${line}`);
});

test('other links and unknown anchors', () => {
  const lines = headingLines(RULES);
  assert.equal(localRuleLink('https://example.com/x.md#a', 'file:///p', lines), undefined);
  assert.equal(localRuleLink('https://github.com/o/r/blob/main/docs/rules.md#nothing', 'file:///p', lines), 'file:///p');
});
