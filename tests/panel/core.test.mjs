// Unit tests of core.js's pure helpers under `node --test` (run by tests/test_panel_js.py,
// which copies the panel's modules next to a package.json saying "type": "module").
// core.js reads navigator.language once at import: each language gets its own instance.
import { test } from 'node:test';
import assert from 'node:assert/strict';

const PANEL = process.env.PANEL_MODULES;
async function core(language) {
  globalThis.navigator = { language };
  return import(`${PANEL}/core.js?${language}`);
}
const en = await core('en-GB');
const zh = await core('zh-CN');

test('t looks a key up and fills its {parameters}; unknown keys and parameters stay', () => {
  assert.equal(en.t('tasks.started', { name: 'nightly' }).includes('nightly'), true);
  assert.match(zh.t('tasks.started', { name: 'nightly' }), /nightly/);
  assert.match(zh.t('tasks.started', { name: 'x' }), /[\u4e00-\u9fff]/);
  assert.equal(en.t('no.such.key'), 'no.such.key');
  assert.equal(en.t('dur.ms', {}), en.t('dur.ms')); // {n} left as it is
  assert.match(en.t('dur.ms'), /\{n\}/);
});

test('words gives the words for a code, else the code', () => {
  assert.equal(en.words('nope.', 'X_Y'), 'X_Y');
  assert.notEqual(zh.words('status.', 'failed'), 'failed');
  assert.equal(en.statusLabel('failed'), en.t('status.failed'));
});

test('fmtDur: ms, seconds, minutes, hours, days; nothing for null or negative', () => {
  assert.equal(en.fmtDur(null), '—');
  assert.equal(en.fmtDur(-1), '—');
  assert.equal(en.fmtDur(250), en.t('dur.ms', { n: 250 }));
  assert.equal(en.fmtDur(2000), en.t('dur.s', { n: 2 }));
  assert.equal(en.fmtDur(1234), en.t('dur.s', { n: '1.23' }));
  assert.equal(en.fmtDur(12345), en.t('dur.s', { n: '12.3' }));
  assert.equal(en.fmtDur(125000), en.t('dur.min', { m: 2, s: 5 }));
  assert.equal(en.fmtDur(3 * 3600e3 + 60e3), en.t('dur.h', { h: 3, m: 1 }));
  assert.equal(en.fmtDur(2 * 86400e3 + 3600e3), en.t('dur.d', { d: 2, h: 1 }));
  assert.notEqual(zh.fmtDur(250), en.fmtDur(250));
});

test('fmtBytes: binary units, one decimal under 10', () => {
  assert.equal(en.fmtBytes(null), '—');
  assert.equal(en.fmtBytes('x'), '—');
  assert.equal(en.fmtBytes(0), '0 B');
  assert.equal(en.fmtBytes(1023), '1023 B');
  assert.equal(en.fmtBytes(1536), '1.5 KiB');
  assert.equal(en.fmtBytes(20 * 1024 * 1024), '20 MiB');
  assert.equal(en.fmtBytes(2 ** 50), '1024 TiB');
});

test('fmtTime: a dash for null, the time zone honoured, a bad zone falls back', () => {
  assert.equal(en.fmtTime(null), '—');
  const at = Date.UTC(2026, 0, 2, 3, 4, 5);
  assert.match(en.fmtTime(at, 'UTC'), /03:04:05/);
  assert.match(en.fmtTime(at, 'Asia/Shanghai'), /11:04:05/);
  assert.equal(en.fmtTime(at, 'Not/AZone'), en.fmtTime(at));
  assert.match(en.fmtTime(at, 'UTC'), /2026/);
});

test('fmtRelative: past and future in seconds, minutes, hours, days', () => {
  const now = Date.now();
  assert.match(en.fmtRelative(now + 3 * 3600e3 + 1000), /in 3 hours/);
  assert.match(en.fmtRelative(now - 5 * 86400e3), /5 days ago/);
  assert.match(en.fmtRelative(now + 2 * 60e3 + 500), /in 2 minutes/);
});

test('q, apiPath, shortId, placeText', () => {
  assert.equal(en.q({ a: 1, b: null, c: '', d: 'x y' }), '?a=1&d=x+y');
  assert.equal(en.q({}), '');
  assert.equal(en.apiPath('scripts', 'a/b c'), '/scripts/a%2Fb%20c');
  assert.equal(en.shortId('0190000000000000abcdef12'), 'abcdef12');
  assert.equal(en.shortId(null), '');
  assert.equal(en.placeText(null), null);
  assert.equal(en.placeText({ node: '', labels: [] }), null);
  assert.equal(en.placeText({ node: 'n2', labels: ['gpu', 'arm'] }),
    en.t('place', { node: 'n2', labels: 'gpu arm' }));
});

test('ApiError says a field rule and an error code in 中文 with their params; English keeps the server text', () => {
  const body = { error: 'INVALID', field: 'name', message: 'name is longer than 200 characters',
    rule: 'TOO_LONG', params: { max: 200, unit: 'characters' } };
  assert.equal(new en.ApiError(422, body).message, body.message);
  const said = new zh.ApiError(422, body).message;
  assert.equal(said, '名称 超过 200 个字符');
  const odd = new zh.ApiError(422, { ...body, rule: 'NO_SUCH_RULE' });
  assert.equal(odd.message, '设备拒绝了此请求（代码 NO_SUCH_RULE）。');  // never the English
  assert.equal(odd.code, 'INVALID');
  const typed = { error: 'INVALID', code: 'WRONG_TYPE', field: 'retries', params: { expected: 'int' },
    message: 'Expected `int`, got `str` - at `$.retries`' };
  assert.equal(new zh.ApiError(422, typed).message, '重试次数 须为整数。');
  const gone = { error: 'NOT_FOUND', params: { what: 'run' }, message: 'run not found' };
  assert.equal(new zh.ApiError(404, gone).message, '找不到该运行（可能已被删除）。');
  const unknown = { error: 'NO_SUCH_CODE', code: 'NOR_THIS', message: 'some English' };
  assert.equal(new zh.ApiError(400, unknown).message, '设备拒绝了此请求（代码 NOR_THIS）。');
  assert.equal(new zh.ApiError(0, null, 'offline').message, 'offline');
});
