/* qledge panel: the overview (#/overview), the first page once there are tasks: the last
 * 24 h or 7 days as runs by outcome over time, the tasks that failed and the slowest ones,
 * from GET /api/v1/task-overview (docs/panel.md). The chart is inline SVG built node by
 * node (no innerHTML, no library). */
import { t, h, fill, grid, row, fmtTime, fmtDur, btn, loading, api, q, heading,
  failBox, refreshBtn, onLeave } from './core.js';
import { firstPage } from './tasks.js';
import { knowZone } from './zonenote.js';

const SVG = 'http://www.w3.org/2000/svg';
// Stacked bottom to top; anything else (cancelled, blocked…) is `other`.
export const GROUPS = [['succeeded', ['succeeded']], ['failed', ['failed', 'timed_out', 'lost']],
  ['running', ['queued', 'running']], ['other', []]];

function svg(tag, attrs, ...kids) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const kid of kids) if (kid) el.append(kid);
  return el;
}

// One bucket's counts, grouped: { succeeded, failed, running, other }.
export function grouped(counts) {
  const out = Object.fromEntries(GROUPS.map(([g]) => [g, 0]));
  for (const [status, n] of Object.entries(counts)) {
    const group = GROUPS.find(([, members]) => members.includes(status));
    out[group ? group[0] : 'other'] += n;
  }
  return out;
}

function chart(view) {
  const W = 720; const H = 180; const pad = 4;
  const bars = view.buckets.map((b) => ({ start: b.start_ms, ...grouped(b.counts) }));
  const total = (b) => GROUPS.reduce((s, [g]) => s + b[g], 0);
  const peak = Math.max(1, ...bars.map(total));
  const step = W / Math.max(1, bars.length);
  const sums = Object.fromEntries(GROUPS.map(([g]) => [g, bars.reduce((s, b) => s + b[g], 0)]));
  const label = t('ov.chartLabel', { ok: sums.succeeded, bad: sums.failed,
    other: sums.running + sums.other });
  const el = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': label,
    class: 'ov-chart', preserveAspectRatio: 'none' });
  bars.forEach((b, i) => {
    let y = H;
    const g = svg('g', { 'data-bucket': i });
    g.append(svg('title', {}, document.createTextNode(
      `${fmtTime(b.start)} — ${GROUPS.map(([k]) => `${t('ov.g.' + k)} ${b[k]}`).join(', ')}`)));
    for (const [k] of GROUPS) {
      if (!b[k]) continue;
      const hgt = Math.max(1, (b[k] / peak) * (H - pad));
      y -= hgt;
      g.append(svg('rect', { x: (i * step + 1).toFixed(1), y: y.toFixed(1),
        width: Math.max(1, step - 2).toFixed(1), height: hgt.toFixed(1), class: 'ov-' + k }));
    }
    el.append(g);
  });
  // The window's ends in HTML under the bars: SVG text would stretch with the chart.
  return h('figure.ov-figure', el, h('div.ov-axis.small.muted', h('span', fmtTime(view.since_ms)),
    h('span', fmtTime(view.since_ms + bars.length * view.bucket_ms))));
}

function legend() {
  return h('p.ov-legend.small', GROUPS.map(([g]) =>
    h('span', h('span', { class: 'ov-key ov-' + g, 'aria-hidden': 'true' }), ' ', t('ov.g.' + g))));
}

function failedTable(view) {
  if (!view.failed.length) return h('p.muted', t('ov.noFailures'));
  const cols = [t('ov.task'), t('ov.failures'), t('ov.lastFailure')];
  return grid(t('ov.failedTitle'), cols, view.failed.map((f) => row({}, cols,
    h('a', { href: '#/runs' + q({ task_id: f.task_id }) }, f.name), String(f.failures),
    h('a', { href: '#/runs/' + f.last_failed_run_id }, fmtTime(f.last_failed_at_ms)))));
}

function slowTable(view) {
  if (!view.slowest.length) return h('p.muted', t('ov.noRuns'));
  const cols = [t('ov.task'), t('ov.runs'), t('ov.p50'), t('ov.max')];
  return grid(t('ov.slowTitle'), cols, view.slowest.map((s) => row({}, cols,
    h('a', { href: '#/tasks/' + s.task_id }, s.name), String(s.runs), fmtDur(s.p50_ms),
    fmtDur(s.max_ms))));
}

export function viewOverview(main, alive, query) {
  const win = query.get('window') === '7d' ? '7d' : '24h';
  const body = h('div', loading());
  const pick = (w) => btn(t(w === '7d' ? 'ov.w7d' : 'ov.w24h'), () => { location.hash = '#/overview' + q({ window: w }); },
    w === win ? 'small primary' : 'small ghost', { 'aria-pressed': String(w === win) });
  heading(main, t('nav.overview'), pick('24h'), pick('7d'), refreshBtn(load));
  main.append(body);
  async function load() {
    let view; let list;
    try {
      [view, list] = await Promise.all([api('GET', '/task-overview' + q({ window: win })),
        api('GET', '/task-list' + q({ limit: 1 }))]);
    } catch (e) {
      if (alive()) failBox(body, e);
      return;
    }
    if (!alive()) return;
    knowZone(view.zone);
    if (!list.all_total) { // nothing of the user's yet: the first-hour page, the start cards
      const head = main.querySelector('.page-head');
      head.querySelector('h1').textContent = t('start.heading');
      document.title = `${t('start.heading')} · qledge`;
      fill(head.querySelector('.actions'), h('a.btn.primary', { href: '#/tasks/new' }, t('tasks.new')));
      fill(body, h('div.card', firstPage()));
      return;
    }
    const runs = view.buckets.reduce((s, b) => s + Object.values(b.counts)
      .reduce((a, n) => a + n, 0), 0);
    fill(body,
      h('section.card', h('h2', t('ov.byOutcome', { n: runs })), legend(), chart(view),
        h('p.muted.small', t('ov.zone', { zone: Intl.DateTimeFormat().resolvedOptions().timeZone }))),
      h('section.card', h('h2', t('ov.failedTitle')), failedTable(view)),
      h('section.card', h('h2', t('ov.slowTitle')), slowTable(view)));
  }
  load();
  const timer = setInterval(() => { if (document.visibilityState === 'visible') load(); }, 30000);
  onLeave(() => clearInterval(timer));
}
