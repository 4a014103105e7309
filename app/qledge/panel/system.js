/* qledge panel: the appliance's health (#/system). */
import { t, words, fmtTime, fmtDur, fmtBytes, h, fill, dl, loading, refreshBtn, grid, row, api,
  heading, failBox, statusLabel } from './core.js';
import { backupCard } from './backup.js';
import { scheduleCard } from './backup_schedule.js';
import { importCard } from './imports.js';

// A round's count (runtime/reconciler.py): `<outcome>:<REASON>` for a run it ended, else
// what it did (adopted, a receipt applied…), in words; an unknown key as it is.
function countWords(k) {
  const [outcome, reason] = k.split(':');
  if (reason) {
    const why = t('reason.' + reason);
    return [statusLabel(outcome), ' — ', why === 'reason.' + reason ? t('reason.unknown') : why];
  }
  return words('round.count.', k);
}

function countsTable(report) {
  if (!report) return h('p.muted', t('system.noRound'));
  const counts = Object.entries(report.counts || {});
  const cols = [t('system.outcome'), t('system.count')];
  return h('div', dl([[t('system.kind'), words('round.', report.kind)],
      [t('system.when'), fmtTime(report.finished_at_ms || report.started_at_ms)],
      [t('system.took'), report.finished_at_ms
        ? fmtDur(report.finished_at_ms - report.started_at_ms) : '—'],
      [t('system.examined'), String(report.examined)]]),
    counts.length ? grid(null, cols, counts.map(([k, v]) => row({ 'data-count': k }, cols,
      countWords(k), String(v))), { class: 'compact' })
      : h('p.muted.small', t('system.nothing')));
}

// A volume whose filesystem reports no size, fails, or hangs ("TimeoutError") has unknown
// free space, not zero: no bar, the words, and what the guard does (docs/retention.md).
function unknownVolume(v, guard) {
  const key = 'system.guard.' + guard;
  const why = !v.error ? t('system.freeUnknown')
    : v.error === 'TimeoutError' ? t('system.freeNoAnswer') : t('system.freeError');
  return [h('div.small', { 'data-role': 'free-unknown' }, why),
    h('div.small.muted', { 'data-role': 'guard' },
      t(key) === key ? t('system.guard', { mode: guard || '—' }) : t(key))];
}

const STALE_MS = 5000;

function volumesView(volumes, pressure) {
  const list = Array.isArray(volumes) ? volumes
    : Object.entries(volumes).map(([name, v]) => ({ name, ...(typeof v === 'object' && v ? v : {}) }));
  return h('div.volumes', list.map((v) => {
    const known = v.free_space_known !== false;
    const total = v.total_bytes;
    const free = v.free_bytes;
    const used = v.used_bytes ?? (total != null && free != null ? total - free : null);
    const pct = total ? Math.round((100 * used) / total) : null;
    return h('div', { class: 'volume' + (v.pressure ? ' warn' : ''), 'data-volume': v.name,
      'data-free': known ? 'known' : 'unknown' },
      h('div.vol-head', h('strong', words('system.vol.', v.name || '?')),
        v.pressure || v.critical ? h('span', { class: 'badge badge-timed_out' },
          t(v.critical ? 'system.critical' : known ? 'system.lowSpace' : 'system.heldUnknown'))
          : null),
      known ? [
        pct != null ? h('meter', { min: 0, max: 100, value: pct, low: 80, high: 92, optimum: 0,
          'aria-label': t('system.volUse', { name: words('system.vol.', v.name || '') }) })
          : null,
        h('div.small', [
          used != null ? t('system.used', { n: fmtBytes(used) }) : null,
          free != null ? t('system.free', { n: fmtBytes(free) }) : null,
          total != null ? t('system.total', { n: fmtBytes(total) }) : null,
          pct != null ? `${pct}%` : null,
          v.low_water_bytes != null ? t('system.lowWater', { n: fmtBytes(v.low_water_bytes) })
            : null,
          v.critical_bytes ? t('system.criticalMark', { n: fmtBytes(v.critical_bytes) }) : null,
        ].filter(Boolean).join(' · ')),
        // A slow probe: the last answer's figures, and how old they are.
        v.age_ms != null && v.age_ms >= STALE_MS ? h('div.small.muted', { 'data-role': 'age' },
          t('system.measuredAgo', { s: Math.round(v.age_ms / 1000) })) : null,
      ] : unknownVolume(v, pressure && pressure.guard_unknown),
      // The probe's error is the server's word (an exception name): said, and kept as a title.
      v.error ? h('div.field-error.small', { title: String(v.error) }, v.error === 'TimeoutError'
        ? t('system.freeNoAnswer') : t('system.freeError')) : null);
  }));
}

function pressureAlert(p) {
  if (!p || p.state !== 'pressure') return null;
  const text = p.reason === 'DISK_FREE_UNKNOWN'
    ? t('system.pressureUnknown', { volumes: (p.volumes || []).map((v) => words('system.vol.', v))
      .join(', ') })
    : t('system.pressure', { reason: words('system.pressureWhy.', p.reason || '') });
  return h('div.alert.warn', { role: 'status', id: 'sys-pressure' }, text);
}

// The bounded pool that reads log files (launch/fileio.py): a stuck filesystem shows
// as busy threads and timeouts here, not as a stuck worker.
function fileReads(f) {
  return f ? h('span', { id: 'sys-file-reads', class: f.timeouts ? 'warn-text' : null },
    t('system.fileReadsVal', f)) : '—';
}

// Why isolation is not in effect (launch/isolation.py): "task_isolation is off", or
// "Landlock unavailable: <the kernel's error>"; said in the reader's words.
function isoWhy(reason) {
  if (!reason) return '';
  if (reason === 'task_isolation is off') return t('system.isoWhy.off');
  const m = /^Landlock unavailable: (.*)$/.exec(reason);
  if (!m) return reason;
  const err = t('system.isoWhy.errno.' + m[1]);
  return t('system.isoWhy.landlock', { error: err.startsWith('system.') ? m[1] : err });
}

// Task isolation (docs/security.md).
function isolationView(iso) {
  return h('section.card', { 'aria-labelledby': 'sys-h6', id: 'sys-isolation',
    'data-effective': String(!!iso.effective) },
  h('h2', { id: 'sys-h6' }, t('system.isolation')),
  iso.effective ? null : h('div', { class: 'alert ' + (iso.mode === 'required' ? 'error' : 'warn'),
    role: 'status', id: 'sys-iso-warning' }, t('system.iso.' + iso.mode, { reason: isoWhy(iso.reason) })),
  dl([[t('system.isoMode'), words('system.isoMode.', iso.mode)],
    [t('system.isoEffective'), iso.effective ? t('common.yes') : t('common.no')],
    [t('system.isoAbi'), iso.landlock_abi == null ? '—' : String(iso.landlock_abi)],
    iso.reason ? [t('system.isoReason'), isoWhy(iso.reason)] : null,
    [t('system.isoProtected'), h('ul.plain', { id: 'sys-iso-protected' },
      (iso.protected || []).map((d) => h('li', h('code.wrap', d))))]]),
  iso.effective ? h('p.muted.small', t('system.isoHelp')) : null);
}

function deletionsView(r) {
  const total = r.deleted_since_start;
  if (!total) return null;
  const last = (r.last_round && r.last_round.deleted) || {};
  const cols = [t('system.delWhat'), t('system.delWhy'), t('system.delLast'),
    t('system.delTotal')];
  return [h('h3', t('system.deleted')), grid(null, cols,
    Object.entries(total).flatMap(([kind, reasons]) => Object.entries(reasons).map(([why, n]) =>
      row({ 'data-reason': why }, cols, words('system.del.', kind), words('evict.', why),
        String((last[kind] || {})[why] ?? '—'), String(n)))),
    { class: 'compact', id: 'sys-deleted' })];
}

// The fleet's nodes (docs/fleet.md): health by the database clock, what runs where. On
// SQLite the one node (no lease, so no heartbeat either).
function nodesView(n) {
  const cols = [t('tasks.col.name'), t('runs.status'), t('editor.labels'), t('nodes.running'),
    t('nodes.hb'), t('nodes.lease'), t('nodes.skew')];
  const ms = (v) => (v == null ? '—' : (v < 0 ? '-' : '') + fmtDur(Math.abs(v)));
  return h('section.card', { id: 'sys-nodes', 'data-fleet': String(n.fleet) },
    h('h2', t('nodes.title')), grid(null, cols, n.items.map((x) => {
      const state = x.state === 'live' && x.lease_expired ? 'late' : x.state;
      return row({ 'data-node': x.name, 'data-state': state }, cols,
        [h('strong', x.name), h('div.labels', x.name === n.self ? h('span.label', t('nodes.self'))
          : null, x.leader ? h('span.label', t('nodes.leader')) : null)],
        h('span', { class: state === 'live' ? 'on' : 'warn-text' }, words('nodes.', state)),
        h('div.labels', x.labels.map((l) => h('span.label', l))), String(x.running_attempts),
        ms(x.heartbeat_age_ms), ms(x.lease_left_ms), ms(x.clock_skew_ms));
    }), { class: 'compact' }));
}

function viewSystem(main, alive) {
  heading(main, t('system.title'), refreshBtn(load));
  const box = h('div.system', loading());
  main.append(box);
  async function load() {
    let s;
    let n;
    try {
      [s, n] = await Promise.all([api('GET', '/system'), api('GET', '/nodes')]);
    } catch (e) {
      if (alive()) failBox(box, e);
      return;
    }
    if (!alive()) return;
    const j = s.journal || {};
    fill(box,
      h('section.card', { 'aria-labelledby': 'sys-h1' },
        h('h2', { id: 'sys-h1' }, t('system.appliance')),
        dl([[t('system.version'), s.version],
          [t('system.profile'), words('system.profileName.', s.profile)],
          [t('system.node'), h('code.wrap', s.node_id)],
          [t('system.uptime'), fmtDur((s.uptime_s || 0) * 1000)],
          [t('system.ready'), s.ready ? t('common.yes') : t('common.no')],
          [t('system.watched'), String(s.watched_attempts ?? '—')],
          [t('system.streams'), String(s.log_streams ?? '—')],
          [t('system.fileReads'), fileReads(s.file_reads)],
          [t('system.rounds'), String(s.rounds ?? '—')]])),
      nodesView(n),
      s.task_isolation ? isolationView(s.task_isolation) : null,
      h('section.card', { 'aria-labelledby': 'sys-h2' },
        h('h2', { id: 'sys-h2' }, t('system.journal')),
        h('div.stats', stat(t('system.backlog'), s.journal_backlog, 'backlog'),
          stat(t('system.active'), j.active ?? 0, 'active'),
          stat(t('system.terminal'), j.terminal ?? 0, 'terminal'),
          j.settled != null ? stat(t('system.settled'), j.settled, 'settled') : null,
          stat(t('system.quarantined'), j.quarantined ?? 0, 'quarantined',
            (j.quarantined || 0) > 0)),
        h('p.muted.small', t('system.journalHelp'))),
      s.volumes ? h('section.card', { 'aria-labelledby': 'sys-h5' },
        h('h2', { id: 'sys-h5' }, t('system.volumes')),
        pressureAlert(s.pressure),
        volumesView(s.volumes, s.pressure),
        s.retention && s.retention.logs_total_bytes != null
          ? h('p.small.muted', t('system.logsUse', {
            n: fmtBytes(s.retention.logs_total_bytes),
            cap: s.retention.logs_cap_bytes ? fmtBytes(s.retention.logs_cap_bytes) : '—',
            runs: s.retention.runs_kept ?? '—' })) : null,
        s.retention && s.retention.policy ? h('p.small.muted', { id: 'sys-policy' },
          t('system.policy', s.retention.policy)) : null,
        s.retention ? deletionsView(s.retention) : null) : null,
      h('section.card', { 'aria-labelledby': 'sys-h3' },
        h('h2', { id: 'sys-h3' }, t('system.lastRound')), countsTable(s.last_round)),
      h('section.card', { 'aria-labelledby': 'sys-h4' },
        h('h2', { id: 'sys-h4' }, t('system.startup')), countsTable(s.startup_recovery)),
      backupCard(),
      importCard(),
      scheduleCard(),
      loginLog());
  }
  function stat(label, value, key, warn) {
    return h('div', { class: 'stat' + (warn ? ' warn' : ''), 'data-stat': key },
      h('div.stat-value', String(value ?? '—')),
      h('div.stat-label', label));
  }
  load();
}

// The login log (issue 39): the last sign-ins — when, from where, how, and how it went;
// never a password or a code.
function loginLog() {
  const cols = [t('system.loginWhen'), t('system.loginClient'), t('account.browser'),
    t('account.method'), t('system.outcome')];
  const box = h('div', loading());
  api('GET', '/auth/logins?limit=20').then((r) => fill(box, r.items.length
    ? grid(t('system.logins'), cols, r.items.map((e) => row(
      { 'data-outcome': e.outcome }, cols, fmtTime(e.at_ms), e.client, e.agent,
      t('signin.method.' + e.method), t('system.login.' + e.outcome))), { id: 'sys-logins' })
    : h('p.muted', t('system.noLogins'))), (e) => failBox(box, e));
  return h('section.card', { id: 'sys-login-log', 'aria-labelledby': 'sys-h9' },
    h('h2', { id: 'sys-h9' }, t('system.logins')), box);
}

export { viewSystem };
