/* qledge panel: the runs list with its filters and pages (#/runs). */
import { t, statusLabel, fmtTime, fmtDur, shortId, h, clear, fill, badge, btn, refreshBtn, grid,
  row, api, q, loadAllTasks, heading, failBox } from './core.js';
const STATUSES = ['queued', 'running', 'succeeded', 'failed', 'cancelled', 'timed_out', 'lost',
  'blocked'];

const PAGE = 20;
// The browser's zone, which every time on this page is shown in (its headers say so).
const here = () => Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';

// State lives in the URL (#/runs?task_id=&status=&page=): a reload or a shared link shows
// the same page; numbered pages (offset) with the total, previous and next (issue #37).
function viewRuns(main, query, alive) {
  const state = { task_id: query.get('task_id') || '', status: query.get('status') || '',
    page: Math.max(1, Number.parseInt(query.get('page') || '1', 10) || 1) };
  heading(main, t('nav.runs'), refreshBtn(load));
  // Searchable task filter: type part of a name, the list (sorted by name) narrows.
  const taskList = h('datalist', { id: 'runs-task-list' });
  const taskIn = h('input', { id: 'runs-task', type: 'search', list: 'runs-task-list',
    autocomplete: 'off', placeholder: t('runs.allTasks') });
  const statusSel = h('select', { id: 'runs-status' },
    h('option', { value: '' }, t('runs.allStatuses')),
    STATUSES.map((s) => h('option', { value: s, selected: s === state.status }, statusLabel(s))));
  const filters = h('form.filters.card', { role: 'search' },
    h('div.field', h('label', { htmlFor: 'runs-task' }, t('runs.task')), taskIn, taskList),
    h('div.field', h('label', { htmlFor: 'runs-status' }, t('runs.status')),
      statusSel),
    h('div.field', h('button.btn', { type: 'submit' }, t('runs.apply'))));
  const results = h('div.card');
  const pager = h('div.pager');
  main.append(filters, results, pager);
  const names = {};
  const byName = new Map();

  filters.addEventListener('submit', (e) => { e.preventDefault(); apply(); });
  taskIn.addEventListener('change', apply);
  statusSel.addEventListener('change', apply);
  function apply() {
    const typed = taskIn.value.trim();
    state.task_id = typed ? (byName.get(typed) || state.task_id) : '';
    if (typed && !byName.has(typed)) taskIn.value = names[state.task_id] || '';
    state.status = statusSel.value;
    go(1);
  }
  function go(page) {
    state.page = page;
    history.replaceState(null, '', '#/runs' + q({ task_id: state.task_id, status: state.status,
      page: page > 1 ? page : '' }));
    load();
  }

  loadAllTasks().then((tasks) => {
    if (!alive()) return;
    const sorted = [...tasks].sort((a, b) => a.name.localeCompare(b.name));
    for (const task of sorted) {
      names[task.id] = task.name;
      if (!byName.has(task.name)) byName.set(task.name, task.id);
      taskList.append(h('option', { value: task.name }));
    }
    taskIn.value = names[state.task_id] || '';
    load();
  }, (e) => { if (alive()) failBox(results, e); });

  let loadSeq = 0; // only the latest request may paint (filters can change quickly)
  async function load() {
    const mine = ++loadSeq;
    const current = () => alive() && mine === loadSeq;
    results.setAttribute('aria-busy', 'true');
    let page;
    try {
      page = await api('GET', '/runs' + q({ task_id: state.task_id, status: state.status,
        offset: (state.page - 1) * PAGE, limit: PAGE }));
    } catch (e) {
      if (current()) { results.removeAttribute('aria-busy'); failBox(results, e); }
      return;
    }
    if (!current()) return;
    results.removeAttribute('aria-busy');
    clear(pager);
    const zone = here();
    const cols = [t('runs.task'), t('runs.status'), t('runs.col.exit'), t('runs.col.trigger'),
      t('runs.col.createdIn', { tz: zone }), t('runs.col.duration')];
    fill(results, !page.items.length ? h('p.empty', t('runs.empty'))
      : grid(t('nav.runs'), cols, page.items.map((r) => row({ 'data-run-id': r.id }, cols,
        h('span', h('a.run-task', { href: '#/runs/' + r.id },
          r.task_name || names[r.task_id] || shortId(r.task_id)),
        h('span.muted.small.mono', ' …' + shortId(r.id))),
        h('span', badge(r.status), r.earlier_attempts
          ? h('span.small.retried', { 'data-earlier': String(r.earlier_attempts) },
            ' ' + t('runs.afterRetries', { n: r.earlier_attempts })) : null),
        r.exit_code == null ? '—' : String(r.exit_code),
        t('trigger.' + r.trigger),
        fmtTime(r.created_at_ms, zone),
        r.started_at_ms ? fmtDur((r.finished_at_ms || Date.now()) - r.started_at_ms) : '—'))));
    const pages = Math.max(1, Math.ceil(page.total / PAGE));
    if (state.page > 1) {
      pager.append(btn(t('runs.prev'), () => go(state.page - 1), 'ghost',
        { 'data-action': 'prev' }));
    }
    pager.append(h('span.muted', { id: 'runs-total', 'data-total': String(page.total) },
      t('runs.pageOf', { n: state.page, m: pages, total: page.total })));
    if (state.page < pages) {
      pager.append(btn(t('runs.next'), () => go(state.page + 1), '',
        { 'data-action': 'next' }));
    }
  }
}

export { viewRuns };
