// Unit tests of log.js's ANSI colour parser (issue #37) under `node --test`.
import { test } from 'node:test';
import assert from 'node:assert/strict';

globalThis.navigator = { language: 'en-GB' };
const PANEL = process.env.PANEL_MODULES;
const { ansiParser } = await import(`${PANEL}/log.js`);

const E = '\x1b';
const run = (...chunks) => { const feed = ansiParser(); return chunks.flatMap((c) => feed(c)); };

test('SGR colours become classes, reset ends them, the codes never show', () => {
  const out = run(`${E}[32m[INFO]${E}[0m started\n`);
  assert.deepEqual(out, [{ text: '[INFO]', cls: ['ansi-fg-32'] }, { text: ' started\n', cls: [] }]);
  assert.ok(!out.some((p) => p.text.includes('[32m') || p.text.includes(E)));
});

test('bold, bright, background and default colour combine and undo one by one', () => {
  const out = run(`${E}[1;91;44ma${E}[22mb${E}[39mc${E}[49md${E}[mE`);
  assert.deepEqual(out.map((p) => [p.text, p.cls]), [
    ['a', ['ansi-fg-91', 'ansi-bg-44', 'ansi-bold']], ['b', ['ansi-fg-91', 'ansi-bg-44']],
    ['c', ['ansi-bg-44']], ['d', []], ['E', []]]);
});

test('other escape sequences are stripped: cursor moves, erase, OSC title, 256 colours', () => {
  const out = run(`a${E}[2K${E}[1A${E}]0;title\x07b${E}[38;5;208mc${E}[?25ld${E}=e${E}(Bf`);
  assert.equal(out.map((p) => p.text).join(''), 'abcdef');
  assert.deepEqual(out.find((p) => p.text === 'c').cls, []); // 38;5;n: unsupported, plain
});

test('a sequence split between chunks is joined, colour carries over chunks', () => {
  const out = run('x', `${E}[3`, '1mred', ' still red', `${E}[0`, 'm plain');
  assert.deepEqual(out.map((p) => [p.text, p.cls.join(' ')]), [
    ['x', ''], ['red', 'ansi-fg-31'], [' still red', 'ansi-fg-31'], [' plain', '']]);
});

test('a lone escape at the end waits; a runaway one is dropped, not kept forever', () => {
  const feed = ansiParser();
  assert.deepEqual(feed(`ok${E}`), [{ text: 'ok', cls: [] }]);
  assert.deepEqual(feed('[0mfine'), [{ text: 'fine', cls: [] }]);
  const long = `${E}]` + 'x'.repeat(100);
  assert.deepEqual(feed(long), []);
  assert.deepEqual(feed('after'), [{ text: 'after', cls: [] }]);
});
