// zones.js (the one time rule: every time shown says its zone) and fmtTime using it,
// under `node --test` with TZ=UTC (tests/test_panel_js.py).
import { test } from 'node:test';
import assert from 'node:assert/strict';

const PANEL = process.env.PANEL_MODULES;
globalThis.navigator = { language: 'en-GB' };
const zones = await import(`${PANEL}/zones.js`);
const core = await import(`${PANEL}/core.js?zones`);
const at = Date.UTC(2026, 0, 2, 3, 4, 5);

test('zoneTag: UTC, whole and half-hour offsets, summer time, a bad zone', () => {
  assert.equal(zones.zoneTag(at, 'UTC'), 'UTC');
  assert.equal(zones.zoneTag(at), 'UTC'); // the browser's (TZ=UTC here)
  assert.equal(zones.zoneTag(at, 'Asia/Shanghai'), 'UTC+8');
  assert.equal(zones.zoneTag(at, 'Asia/Kolkata'), 'UTC+5:30');
  assert.equal(zones.zoneTag(at, 'America/New_York'), 'UTC-5');
  assert.equal(zones.zoneTag(Date.UTC(2026, 6, 2), 'America/New_York'), 'UTC-4');
  assert.equal(zones.zoneTag(at, 'Not/AZone'), '');
});

test('zonesDiffer: by offset now or in half a year, not by name', () => {
  assert.equal(zones.zonesDiffer('UTC', 'Etc/UTC'), false);
  assert.equal(zones.zonesDiffer('UTC', 'Asia/Shanghai'), true);
  assert.equal(zones.zonesDiffer('Asia/Shanghai', 'Asia/Taipei'), false);
  assert.equal(zones.zonesDiffer('Europe/London', 'UTC'), true); // summer time
  assert.equal(zones.browserZone(), 'UTC');
});

test('fmtTime says the zone it formats in', () => {
  assert.match(core.fmtTime(at, 'Asia/Shanghai'), /11:04:05 UTC\+8$/);
  assert.match(core.fmtTime(at, 'UTC'), /03:04:05 UTC$/);
  assert.match(core.fmtTime(at), /03:04:05 UTC$/);
  assert.equal(core.fmtTime(at, 'Not/AZone'), core.fmtTime(at));
});
