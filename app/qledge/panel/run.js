/* qledge panel: one run: summary, timeline and attempts (#/runs/<id>). */
import { t, words, statusLabel, fmtTime, fmtDur, shortId, placeText, h, fill, badge, btn, dl, grid, row,
  apiPath, notify, confirmDialog, api, onLeave, heading } from './core.js';
import { logSection, attemptLog } from './log.js';
import { zoneLine } from './zonenote.js';

function eventText(ev) {
  const d = ev.data || {};
  switch (ev.type) {
    case 'run.created': return t('ev.created', { trigger: t('trigger.' + d.trigger) });
    case 'run.scheduled': return t('ev.scheduled', { at: fmtTime(d.scheduled_for_ms),
      late: fmtDur(d.late_ms) });
    case 'attempt.created': return t('ev.attemptCreated');
    case 'attempt.started': return t('ev.attemptStarted', { pid: d.pid });
    case 'run.started': return t('ev.started');
    case 'run.cancel_requested': return t('ev.cancelRequested', { reason: t('cancel.' + d.reason) });
    case 'attempt.signal_sent': return t('ev.signal', { signal: d.signal, epoch: d.epoch });
    case 'attempt.finished': return t('ev.attemptFinished', { status: statusLabel(d.status) }) +
      finishFacts(d);
    case 'run.finished': return t('ev.finished', { status: statusLabel(d.status) }) +
      finishFacts(d);
    case 'schedule.skipped': return t(d.reason === 'queued_run' ? 'ev.skippedQueued'
      : 'ev.skipped', { at: fmtTime(d.scheduled_for_ms) });
    case 'attempt.late_receipt': return t('ev.late', { code: d.exit_code, epoch: d.epoch });
    case 'run.held': return t('ev.held', { why: heldText(d) });
    case 'run.retry_scheduled': return t('ev.retry', { n: d.attempt_no,
      status: statusLabel(d.status), at: fmtTime(d.not_before_ms) });
    case 'run.replaces': return t('ev.replaces', { id: d.run_id });
    case 'run.replaced_by': return t('ev.replacedBy', { id: d.run_id });
    case 'chain.triggered': return t('ev.chained', { id: d.run_id });
    case 'chain.triggered_by': return t('ev.chainedBy', { id: d.run_id,
      status: statusLabel(d.status) });
    case 'chain.skipped': return t('ev.chainSkipped', { id: d.task_id,
      reason: words('ev.chainWhy.', d.reason) });
    // A type this panel does not know: named, in the reader's words (never the raw data).
    default: return t('ev.unknown', { type: ev.type });
  }
}

// `leftover_processes`: what the launcher ended after the exit (docs/tasks.md).
function finishFacts(d) {
  return (d.exit_code != null ? ' · ' + t('runs.exit', { code: d.exit_code }) : '') +
    (d.leftover_processes ? ' · ' + leftoverText(d.leftover_processes) : '');
}
const leftoverText = (n) => t(n === 1 ? 'ev.leftover1' : 'ev.leftover', { n });

// Why a queued run was held back (docs/retention.md: disk pressure).
function heldText(d) {
  const key = 'held.' + d.reason;
  const text = t(key, { volumes: String(d.volumes || '—').split(',').join(', ') });
  return text === key ? String(d.reason) : text;
}

function reasonText(code) {
  if (!code) return null;
  const key = 'reason.' + code;
  const text = t(key);
  return text === key ? t('reason.unknown') : text;
}

const runLink = (id, text) => h('a', { href: '#/runs/' + id }, text);

function summaryView(r, taskName, now, events) {
  const reason = reasonText(r.reason_code);
  const fin = events.find((ev) => ev.type === 'run.finished');
  const leftover = fin && fin.data && fin.data.leftover_processes;
  return [
    h('h2.sr-only', { id: 'run-sum-h' }, t('run.summary')),
    h('div.status-line', h('span', { id: 'run-status' }, badge(r.status)),
      r.exit_code != null
        ? h('span.exit.big', { id: 'run-exit' }, t('runs.exit', { code: r.exit_code }))
        : null,
      null),
    // The reason in words; its stable code (docs/recovery.md) as the title, not shown.
    reason ? h('p.reason', { id: 'run-reason', title: r.reason_code }, reason) : null,
    dl([
      [t('runs.task'), h('a', { href: '#/tasks/' + r.task_id }, taskName || shortId(r.task_id))],
      [t('run.id'), h('code.wrap', r.id)],
      [t('runs.col.trigger'), t('trigger.' + r.trigger)],
      [t('run.zone'), zoneLine()],
      [t('runs.col.created'), fmtTime(r.created_at_ms)],
      [t('run.started'), fmtTime(r.started_at_ms)],
      [t('run.finished'), fmtTime(r.finished_at_ms)],
      [t('run.waited'), r.started_at_ms ? fmtDur(r.started_at_ms - r.created_at_ms)
        : (r.terminal ? '—' : fmtDur(now - r.created_at_ms))],
      [t('run.duration'), r.started_at_ms
        ? fmtDur((r.finished_at_ms || now) - r.started_at_ms) + (r.finished_at_ms ? '' : ' …')
        : '—'],
      r.cancel_reason ? [t('run.cancelReason'), t('cancel.' + r.cancel_reason)] : null,
      // a retry's (or a start delay's) persisted wait, counted down on each refresh
      r.status === 'queued' && r.not_before_ms > now ? [t('run.nextAttempt'),
        h('span', { id: 'run-retry-in' }, fmtDur(r.not_before_ms - now))] : null,
      leftover ? [t('run.leftover'), h('span', { id: 'run-leftover' }, leftoverText(leftover))]
        : null,
      // fleet mode (docs/fleet.md): where it may run, and why no node takes it yet
      placeText(r.placement) ? [t('place.title'), placeText(r.placement)] : null,
      r.waiting ? [t('run.waiting'), h('span', { id: 'run-waiting' }, t('wait.' + r.waiting.reason,
        { node: r.waiting.node, labels: r.waiting.labels.join(' ') }))] : null,
      // The `task` form (docs/tasks.md): a random delay's wait; a conc run's parent/children.
      r.not_before_ms && !r.started_at_ms ? [t('run.notBefore'), fmtTime(r.not_before_ms)] : null,
      r.parent_run_id ? [t('run.parent'), runLink(r.parent_run_id, shortId(r.parent_run_id))]
        : null,
      r.children && r.children.length ? [t('run.children'), h('span', { id: 'run-children' },
        ...r.children.map((c) => h('span', runLink(c.id, '#' + c.conc_index), ' ',
          badge(c.status), ' ')))] : null,
    ]),
  ];
}

/* The run's record is the truth: a finish event is recorded after its receipt is read
 * (much later if the worker was down), so start and finish events sit at the record's
 * times and say when they were recorded if that was a second or more later. */
const LATE_RECORD_MS = 1000;
function factTime(r, ev) {
  const attempt = ev.attempt_id ? r.attempts.find((a) => a.id === ev.attempt_id) : null;
  const fact = {
    'run.started': r.started_at_ms,
    'run.finished': r.finished_at_ms,
    'attempt.started': attempt && attempt.started_at_ms,
    'attempt.finished': attempt && attempt.finished_at_ms,
  }[ev.type];
  return fact == null ? ev.at_ms : fact;
}

function timelineItems(r, events) {
  return events.map((ev) => {
    const at = factTime(r, ev);
    const late = ev.at_ms - at;
    return h('li', { 'data-type': ev.type, class: 'ev ev-' + ev.type.replace(/\W/g, '-') },
      h('time', { datetime: new Date(at).toISOString() }, fmtTime(at)),
      h('span.muted.small.ev-offset', ' +' + fmtDur(at - r.created_at_ms)),
      late >= LATE_RECORD_MS
        ? h('span.muted.small.ev-recorded', ' · ' + t('run.recordedLater',
          { d: fmtDur(late) }))
        : null,
      h('div.ev-text', eventText(ev)),
      ev.type === 'run.finished' && ev.data && ev.data.reason_code
        ? h('div.muted.small', { title: ev.data.reason_code }, reasonText(ev.data.reason_code))
        : null);
  });
}

function attemptsView(r, now, showLog) {
  if (!r.attempts.length) return h('p.muted', t('run.noAttempts'));
  const cols = [t('att.no'), t('runs.status'), t('runs.col.exit'), t('att.reason'), t('att.node'),
    t('att.pid'), t('run.started'), t('runs.col.duration'), t('att.log')];
  // A receipt that came after a takeover decided the attempt: recorded, never applied.
  const late = r.attempts.filter((a) => a.late_exit_code != null).map((a) => h('p.alert.warn',
    { 'data-late': a.attempt_no }, t('att.late', { n: a.attempt_no, code: a.late_exit_code,
      node: a.node || '?' })));
  return [grid(null, cols, r.attempts.map((a) => row(null, cols,
    '#' + a.attempt_no,
    badge(a.status === 'preparing' ? r.status : a.status),
    a.exit_code == null ? '—' : String(a.exit_code),
    a.reason_code ? h('span', { title: a.reason_code }, reasonText(a.reason_code)) : '—',
    a.node || '—',
    a.pid == null ? '—' : String(a.pid),
    fmtTime(a.started_at_ms),
    a.started_at_ms ? fmtDur((a.finished_at_ms || now) - a.started_at_ms) : '—',
    // every attempt's own log (GET /runs/{id}/log?attempt=n), shown under the table
    btn(t('att.openLog', { n: a.attempt_no }), () => showLog(a.attempt_no), 'small ghost',
      { 'data-action': 'attempt-log', 'data-attempt': String(a.attempt_no) })))), late];
}

function cancelButton(runId, refresh) {
  return btn(t('run.cancel'), async () => {
    const ok = await confirmDialog(t('run.cancelTitle'), t('run.cancelBody'), t('run.cancel'), true);
    if (!ok) return;
    try {
      await api('POST', apiPath('runs', runId, 'cancel'));
      notify(t('run.cancelSent'), 'ok');
      refresh();
    } catch (e) { notify(e.message, 'error'); refresh(); }
  }, 'danger', { 'data-action': 'cancel-run', hidden: true });
}

// "Run again": a new run of the task, asked nothing, opened at once.
function againButton() {
  const b = btn(t('run.again'), async () => {
    b.disabled = true;
    try {
      const got = await api('POST', apiPath('tasks', b.dataset.taskId, 'runs'));
      location.hash = '#/runs/' + got.run.id;
    } catch (e) { notify(e.message, 'error'); } finally { b.disabled = false; }
  }, '', { 'data-action': 'run-again', hidden: true });
  return b;
}

function viewRun(main, runId, alive) {
  const title = heading(main, t('run.title', { id: shortId(runId) }));
  const cancelBtn = cancelButton(runId, () => refresh());
  const againBtn = againButton();
  const editLink = h('a.btn.ghost', { 'data-action': 'edit-task', hidden: true }, t('run.editTask'));
  title.parentNode.querySelector('.actions').append(againBtn, editLink, cancelBtn);
  const conn = h('div.alert.warn', { role: 'status', hidden: true });
  const summary = h('section.card.summary', { 'aria-labelledby': 'run-sum-h' },
    h('h2.sr-only', { id: 'run-sum-h' }, t('run.summary')));
  const log = logSection(runId);
  const timeline = h('ol.timeline', { id: 'timeline' });
  const attempts = h('div');
  const attemptBox = h('div', { id: 'attempt-log-box' });
  const showLog = (n) => fill(attemptBox, attemptLog(runId, n));
  main.append(conn, summary, log.el,
    h('section.card', { 'aria-labelledby': 'tl-h' },
      h('h2', { id: 'tl-h' }, t('run.timeline')), timeline),
    h('section.card', { 'aria-labelledby': 'att-h' },
      h('h2', { id: 'att-h' }, t('run.attempts')), attempts, attemptBox));

  let run = null;
  let taskName = null;
  let pollTimer = 0;
  let polling = false;
  let failures = 0;

  function paint(r, events) {
    const name = r.task_name || taskName || t('run.title', { id: shortId(r.id) });
    fill(title, name, h('span.muted.small.mono.run-id', ' …' + shortId(r.id)));
    document.title = `${name} · ${statusLabel(r.status)} · qledge`;
    againBtn.dataset.taskId = r.task_id;
    againBtn.hidden = false;
    editLink.href = '#/tasks/' + r.task_id;
    editLink.hidden = false;
    cancelBtn.hidden = r.terminal;
    cancelBtn.disabled = r.cancel_reason != null;
    cancelBtn.textContent = r.cancel_reason != null ? t('run.cancelPending') : t('run.cancel');
    const now = Date.now();
    fill(summary, ...summaryView(r, taskName, now, events));
    fill(timeline, ...timelineItems(r, events));
    fill(attempts, attemptsView(r, now, showLog));
    // the log of the latest attempt (the one the stream follows) against its length at
    // exit; null = the file could not be looked at just now: leave the note as it is
    const last = r.attempts[r.attempts.length - 1];
    if (last && last.log_truncated != null) {
      log.truncated(last.log_truncated, last.log_size, last.log_bytes_at_exit);
    }
  }

  // Polls the run and its events every 2 s while it is active (backing off while the
  // appliance is unreachable); the log's `end` event asks for one last refresh.
  async function refresh() {
    if (polling) return;
    polling = true;
    try {
      const [r, evs] = await Promise.all([
        api('GET', apiPath('runs', runId)), api('GET', apiPath('runs', runId, 'events'))]);
      if (taskName == null && r.task_name) taskName = r.task_name;
      if (taskName == null) {
        taskName = await api('GET', apiPath('tasks', r.task_id))
          .then((tk) => tk.name, () => shortId(r.task_id));
      }
      if (!alive()) return;
      failures = 0;
      conn.hidden = true;
      run = r;
      paint(r, evs.items);
    } catch (e) {
      if (!alive()) return;
      if (e.status === 404) {
        fill(summary, h('div.alert.error', { role: 'alert' }, t('run.missing')));
        stopPolling();
        return;
      }
      failures += 1;
      conn.textContent = t('run.reconnecting');
      conn.hidden = false;
    } finally {
      polling = false;
    }
    schedulePoll();
  }
  function schedulePoll() {
    clearTimeout(pollTimer);
    if (!alive() || (run && run.terminal)) return;
    pollTimer = setTimeout(refresh, Math.min(10000, 2000 * (1 + failures)));
  }
  function stopPolling() { clearTimeout(pollTimer); pollTimer = 0; }
  onLeave(stopPolling);

  refresh();
  log.start(alive, () => { stopPolling(); refresh(); });
}

export { viewRun, eventText };
