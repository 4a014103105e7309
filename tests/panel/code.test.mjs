// Unit tests of code.js's pure helpers (tokenizer, find, indent) under `node --test`.
import { test } from 'node:test';
import assert from 'node:assert/strict';

const PANEL = process.env.PANEL_MODULES;
globalThis.navigator = { language: 'en-GB' };
const { tokenize, findAll, indent, langOf } = await import(`${PANEL}/code.js`);

const kinds = (text, lang) => tokenize(text, lang).map(([a, b, c]) => [text.slice(a, b), c]);

test('the language comes from the file name', () => {
  assert.equal(langOf('a/b.py'), 'py');
  assert.equal(langOf('x.JS'), 'js');
  assert.equal(langOf('run.sh'), 'sh');
  assert.equal(langOf('notes.txt'), null);
});

test('python: comments, strings, numbers, keywords; a # inside a string is no comment', () => {
  assert.deepEqual(kinds("def f(x):  # hi\n    return 'a#b' + 42", 'py'), [
    ['def', 'k'], ['# hi', 'c'], ['return', 'k'], ["'a#b'", 's'], ['42', 'n']]);
  assert.deepEqual(kinds('s = """one\ntwo"""', 'py'), [['"""one\ntwo"""', 's']]);
});

test('javascript and shell', () => {
  assert.deepEqual(kinds('const a = `x${1}`; // c\n/* b */', 'js'), [
    ['const', 'k'], ['`x${1}`', 's'], ['// c', 'c'], ['/* b */', 'c']]);
  assert.deepEqual(kinds('if [ "$A" ]; then echo x#y # c\nfi', 'sh'), [
    ['if', 'k'], ['"$A"', 's'], ['then', 'k'], ['echo', 'k'], ['# c', 'c'], ['fi', 'k']]);
  assert.deepEqual(tokenize('anything', null), []);
});

test('an unterminated string ends the tokens without looping', () => {
  assert.deepEqual(kinds("x = 'open", 'py'), [["'open", 's']]);
});

test('tokenizing 2,000 lines stays fast', () => {
  const line = "    total += price * 1.5  # add 'tax' \"x\"\n";
  const text = ('def checkin(user):\n' + line.repeat(19)).repeat(100);
  const t0 = performance.now();
  const n = tokenize(text, 'py').length;
  const ms = performance.now() - t0;
  assert.ok(n > 3000, String(n)); // two tokens (number, comment) a line
  assert.ok(ms < 200, `${ms} ms`);
});

test('find is case-insensitive and does not overlap', () => {
  assert.deepEqual(findAll('aAaa', 'aa'), [[0, 2], [2, 4]]);
  assert.deepEqual(findAll('abc', ''), []);
});

test('Tab inserts at the caret; on a selection of lines it indents each; Shift-Tab outdents', () => {
  assert.deepEqual(indent('ab', 1, 1, '    ', false), { text: 'a    b', start: 5, end: 5 });
  const r = indent('x\ny\nz', 0, 3, '    ', false);
  assert.equal(r.text, '    x\n    y\nz');
  assert.deepEqual([r.start, r.end], [0, 11]);
  const o = indent(r.text, r.start, r.end, '    ', true);
  assert.equal(o.text, 'x\ny\nz');
  assert.equal(indent('  a', 3, 3, '    ', true).text, 'a');
  assert.equal(indent('\tb', 2, 2, '\t', true).text, 'b');
});
