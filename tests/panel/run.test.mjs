// Unit tests of run.js's eventText (the timeline in words) under `node --test`; the
// browser tests check every event type the backend writes in both languages.
import { test } from 'node:test';
import assert from 'node:assert/strict';

globalThis.navigator = { language: 'en-GB' };
const PANEL = process.env.PANEL_MODULES;
const { eventText } = await import(`${PANEL}/run.js`);
const { t } = await import(`${PANEL}/core.js`);

test('a finish says its status, exit code and the leftover processes (one or more)', () => {
  const text = eventText({ type: 'run.finished',
    data: { status: 'failed', exit_code: 3, leftover_processes: 2 } });
  assert.equal(text, t('ev.finished', { status: t('status.failed') }) + ' · '
    + t('runs.exit', { code: 3 }) + ' · ' + t('ev.leftover', { n: 2 }));
  assert.match(text, /2/);
  assert.ok(eventText({ type: 'attempt.finished',
    data: { status: 'succeeded', exit_code: 0, leftover_processes: 1 } })
    .endsWith(t('ev.leftover1', { n: 1 })));
  assert.equal(eventText({ type: 'run.finished', data: { status: 'lost' } }),
    t('ev.finished', { status: t('status.lost') }));
});

test('parameters are filled, never left as {name}', () => {
  for (const ev of [
    { type: 'attempt.started', data: { pid: 42 } },
    { type: 'attempt.signal_sent', data: { signal: 'TERM', epoch: 1 } },
    { type: 'run.retry_scheduled', data: { attempt_no: 2, status: 'failed', not_before_ms: 0 } },
    { type: 'attempt.late_receipt', data: { exit_code: 4, epoch: 2 } },
  ]) {
    const text = eventText(ev);
    assert.doesNotMatch(text, /[{}]|undefined|null|NaN/, ev.type);
    assert.ok(!text.includes(ev.type), ev.type);
  }
});

test('a type the panel does not know is named in words, never its raw data (issue 38)', () => {
  assert.equal(eventText({ type: 'x.new', data: { a: 1 } }),
    'An event this panel does not know (x.new)');
  assert.equal(eventText({ type: 'x.new' }), 'An event this panel does not know (x.new)');
});
