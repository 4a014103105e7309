/* qledge panel: the runs list with its filters and pages (#/runs). */
import { t, statusLabel, fmtTime, fmtDur, shortId, h, clear, fill, badge, btn, refreshBtn, grid,
  row, api, q, loadAllTasks, heading, failBox } from './core.js';
const STATUSES = ['queued', 'running', 'succeeded', 'failed', 'cancelled', 'timed_out', 'lost',
  'blocked'];

function viewRuns(main, query, alive) {
  const state = { task_id: query.get('task_id') || '', status: query.get('status') || '',
    cursors: [] };
  heading(main, t('nav.runs'), refreshBtn(load));
  const taskSel = h('select', { id: 'runs-task' }, h('option', { value: '' }, t('runs.allTasks')));
  const statusSel = h('select', { id: 'runs-status' },
    h('option', { value: '' }, t('runs.allStatuses')),
    STATUSES.map((s) => h('option', { value: s, selected: s === state.status }, statusLabel(s))));
  const filters = h('form.filters.card', { role: 'search' },
    h('div.field', h('label', { htmlFor: 'runs-task' }, t('runs.task')), taskSel),
    h('div.field', h('label', { htmlFor: 'runs-status' }, t('runs.status')),
      statusSel),
    h('div.field', h('button.btn', { type: 'submit' }, t('runs.apply'))));
  const results = h('div.card');
  const pager = h('div.pager');
  main.append(filters, results, pager);
  let names = {};

  filters.addEventListener('submit', (e) => { e.preventDefault(); apply(); });
  taskSel.addEventListener('change', apply);
  statusSel.addEventListener('change', apply);
  function apply() {
    state.task_id = taskSel.value;
    state.status = statusSel.value;
    state.cursors = [];
    history.replaceState(null, '', '#/runs' + q({ task_id: state.task_id, status: state.status }));
    load();
  }

  loadAllTasks().then((tasks) => {
    if (!alive()) return;
    for (const task of tasks) {
      names[task.id] = task.name;
      taskSel.append(h('option', { value: task.id, selected: task.id === state.task_id }, task.name));
    }
    load();
  }, (e) => { if (alive()) failBox(results, e); });

  let loadSeq = 0; // only the latest request may paint (filters can change quickly)
  async function load() {
    const mine = ++loadSeq;
    const current = () => alive() && mine === loadSeq;
    const cursor = state.cursors[state.cursors.length - 1] || '';
    results.setAttribute('aria-busy', 'true');
    let page;
    try {
      page = await api('GET', '/runs' + q({ task_id: state.task_id, status: state.status,
        cursor, limit: 20 }));
    } catch (e) {
      if (current()) { results.removeAttribute('aria-busy'); failBox(results, e); }
      return;
    }
    if (!current()) return;
    results.removeAttribute('aria-busy');
    clear(pager);
    const cols = [t('runs.col.run'), t('runs.task'), t('runs.status'),
      t('runs.col.exit'), t('runs.col.trigger'), t('runs.col.created'), t('runs.col.duration')];
    fill(results, !page.items.length ? h('p.empty', t('runs.empty'))
      : grid(t('nav.runs'), cols, page.items.map((r) => row({ 'data-run-id': r.id }, cols,
        h('a.mono', { href: '#/runs/' + r.id }, '…' + shortId(r.id)),
        names[r.task_id] || shortId(r.task_id),
        badge(r.status),
        r.exit_code == null ? '—' : String(r.exit_code),
        t('trigger.' + r.trigger),
        fmtTime(r.created_at_ms),
        r.started_at_ms ? fmtDur((r.finished_at_ms || Date.now()) - r.started_at_ms) : '—'))));
    if (state.cursors.length) {
      pager.append(btn(t('runs.first'), () => { state.cursors = []; load(); }, 'ghost',
        { 'data-action': 'first' }));
    }
    pager.append(h('span.muted', t('runs.page', { n: state.cursors.length + 1 })));
    if (page.next_cursor) {
      pager.append(btn(t('runs.next'), () => { state.cursors.push(page.next_cursor); load(); },
        '', { 'data-action': 'next' }));
    }
  }
}

export { viewRuns };
