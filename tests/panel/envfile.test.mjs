// Unit tests of envfile.js (QingLong's envs JSON) under `node --test` (tests/test_panel_js.py).
import { test } from 'node:test';
import assert from 'node:assert/strict';

const PANEL = process.env.PANEL_MODULES;
globalThis.navigator = { language: 'en-GB' };
const { exportEnvs, parseEnvFile, splice } = await import(`${PANEL}/envfile.js`);

test('an export reads back as the same envs, values byte for byte', () => {
  const envs = [{ name: 'COOKIE', value: 'a\nb\r\nc', remarks: 'r', enabled: true },
    { name: 'OFF', value: '', remarks: '', enabled: false }];
  const rows = JSON.parse(exportEnvs(envs));
  assert.deepEqual(rows, [{ name: 'COOKIE', value: 'a\nb\r\nc', remarks: 'r', status: 0 },
    { name: 'OFF', value: '', remarks: '', status: 1 }]);
  assert.deepEqual(parseEnvFile(exportEnvs(envs)).items, envs);
});

test('QingLong rows and its API answer are read; their other keys are left out', () => {
  const row = { id: 7, name: ' JD_COOKIE ', value: 'pt_key=1;', status: 1, position: 4.5e15,
    timestamp: 'x', remarks: null, createdAt: 'y' };
  const want = [{ name: 'JD_COOKIE', value: 'pt_key=1;', remarks: '', enabled: false }];
  assert.deepEqual(parseEnvFile(JSON.stringify([row])).items, want);
  assert.deepEqual(parseEnvFile(JSON.stringify({ code: 200, data: [row] })).items, want);
});

test('a malformed file is refused with a reason naming the row', () => {
  assert.match(parseEnvFile('{oops').error, /not JSON/);
  assert.match(parseEnvFile('{"a": 1}').error, /list of variables/);
  assert.match(parseEnvFile('[]').error, /empty/);
  assert.match(parseEnvFile('[{"name":"A","value":"1"}, 3]').error, /item 2 is not an object/);
  assert.match(parseEnvFile('[{"name":"9A","value":"1"}]').error, /item 1: the name/);
  assert.match(parseEnvFile('[{"name":"A"}]').error, /item 1: the value/);
  assert.match(parseEnvFile('[{"name":"A","value":"1","status":2}]').error, /status must be 0/);
  assert.match(parseEnvFile('[{"name":"A","value":"1","remarks":5}]').error, /remarks/);
});

test('splice keeps CR LF the textarea cannot hold, through edits and pastes', () => {
  const raw = 'a\r\nb\r\nc';
  const shown = 'a\nb\nc';
  assert.equal(splice(raw, shown, 'a\nbX\nc', null), 'a\r\nbX\r\nc'); // typed
  assert.equal(splice(raw, shown, 'a\nc', null), 'a\r\nc'); // a line deleted
  assert.equal(splice('', '', 'x\ny', 'x\r\ny'), 'x\r\ny'); // pasted with CR LF
  assert.equal(splice('ab', 'ab', 'ax\nyb', 'x\r\ny'), 'ax\r\nyb');
  assert.equal(splice('a\rb', 'a\nb', 'a\nbc', null), 'a\rbc'); // a lone CR stays
  assert.equal(splice(raw, shown, '', null), '');
});
