/* qledge panel: the task list (#/tasks). */
import { t, fmtTime, fmtRelative, placeText, h, rowBtn, actionsCell, loading,
  refreshBtn, grid, row, guarded, apiPath, notify, confirmDialog, api, q, heading,
  failBox, fill, btn, onLeave, fmtDur, statusLabel, locale } from './core.js';
import { zoneTag } from './zones.js';
import { knowZone } from './zonenote.js';

async function runNow(task) {
  try {
    const res = await api('POST', apiPath('tasks', task.id, 'runs'));
    notify(t('tasks.started', { name: task.name }), 'ok');
    location.hash = '#/runs/' + res.run.id;
  } catch (e) {
    if (e.status === 409 && e.body.active_run_id) {
      notify(t('tasks.busy', { name: task.name }), 'error');
      location.hash = '#/runs/' + e.body.active_run_id;
    } else {
      notify(e.message, 'error');
    }
  }
}

const PAGE = 25;
const FAILED = ['failed', 'timed_out', 'lost'];

// The last runs, oldest left: one coloured square per run, each a link with its words.
function strip(task) {
  const runs = [...(task.runs || [])].reverse();
  if (!runs.length) return h('span.muted', t('tasks.never'));
  return h('div.strip', { role: 'list', 'aria-label': t('tasklist.strip') },
    runs.map((r) => h('a', { role: 'listitem', href: '#/runs/' + r.id,
      class: 'sq sq-' + (FAILED.includes(r.status) ? 'bad' : r.status === 'succeeded' ? 'ok' : 'other'),
      'data-status': r.status,
      title: `${statusLabel(r.status)}${r.exit_code != null ? ' · ' + t('runs.exit', { code: r.exit_code }) : ''}`
        + ` · ${fmtTime(r.created_at_ms)}${r.duration_ms != null ? ' · ' + fmtDur(r.duration_ms) : ''}`,
      'aria-label': `${statusLabel(r.status)}, ${fmtTime(r.created_at_ms)}` })));
}

// The next fire time in the zone the schedule runs in — the task's, else the appliance's
// (said so) — short ("5 Dec, 08:00 UTC+8"), the zone named under it (docs/panel.md "Time").
function nextText(task, zone) {
  const tz = task.tz || zone; const at = task.next_fire_at_ms;
  let when;
  try {
    when = new Intl.DateTimeFormat(locale(), { month: 'short', day: 'numeric', hour: '2-digit',
      minute: '2-digit', hourCycle: 'h23', timeZone: tz }).format(new Date(at)) + ' ' + zoneTag(at, tz);
  } catch (e) { when = fmtTime(at); } // a zone this browser does not know
  return [h('div', t('tasks.next', { when, rel: fmtRelative(at) })), h('div', { 'data-role': 'zone',
    'data-zone': tz }, task.tz ? task.tz : t('tasklist.applianceZone', { zone }))];
}

function taskRow(task, cols, reload, picked, zone) {
  const sched = task.schedule
    ? [h('code', task.schedule), h('div.muted.small', { 'data-role': 'next' },
      task.next_fire_at_ms ? nextText(task, zone) : t('tasks.paused'))]
    : h('span.muted', t('tasks.manual'));
  const toggle = rowBtn(task.enabled ? t('tasks.disable') : t('tasks.enable'), task.name,
    guarded(async () => {
      await api('PUT', apiPath('tasks', task.id), { enabled: !task.enabled });
      notify(t(task.enabled ? 'tasks.disabled' : 'tasks.enabled', { name: task.name }), 'ok');
      await reload();
    }), 'small', { 'data-action': 'toggle' });
  const del = rowBtn(t('common.delete'), task.name, guarded(async () => {
    if (!await confirmDialog(t('tasks.deleteTitle'), t('tasks.deleteBody', { name: task.name }),
      t('common.delete'), true)) return;
    await api('DELETE', apiPath('tasks', task.id));
    notify(t('tasks.deleted', { name: task.name }), 'ok');
    await reload();
  }), 'small danger-ghost', { 'data-action': 'delete' });
  const pick = h('input', { type: 'checkbox', 'data-role': 'pick', checked: picked.has(task.id),
    'aria-label': t('tasklist.pick', { name: task.name }),
    onchange: (e) => { if (e.target.checked) picked.add(task.id); else picked.delete(task.id); } });
  return row({ 'data-task-id': task.id, 'data-task-name': task.name,
    class: task.enabled ? null : 'is-off' }, cols,
    pick,
    [h('a.strong', { href: '#/tasks/' + task.id }, task.name),
      h('div.cmd.muted.small', { title: task.command }, task.command),
      task.labels.length ? h('div.labels', task.labels.map((l) => h('span.label', l))) : null,
      placeText(task.placement) && h('div.muted.small', { 'data-role': 'placement' },
        t('place.title') + ': ' + placeText(task.placement))],
    sched,
    strip(task),
    actionsCell(cols[4],
      rowBtn(t('tasks.run'), task.name, () => runNow(task), 'small primary', { 'data-action': 'run' }),
      toggle,
      link(t('common.edit'), '#/tasks/' + task.id, task, { 'data-action': 'edit' }),
      link(t('nav.runs'), '#/runs?task_id=' + task.id, task),
      del));
}
const link = (label, href, task, extra) => h('a.btn.small', { href, ...extra,
  'aria-label': `${label} — ${task.name}` }, label);

function firstPage() {
  const card = (key, href, action) => h('a.card.start-card', { href, 'data-start': action },
    h('strong', t(key + '.title')), h('p.muted', t(key + '.body')));
  return h('div.start', { 'data-role': 'first-page' },
    h('p', t('tasks.empty')),
    h('div.start-cards',
      card('start.import', '#/system', 'import'),
      card('start.subs', '#/subs', 'subs'),
      card('start.scripts', '#/scripts', 'scripts'),
      card('start.task', '#/tasks/new', 'task')));
}

function viewTasks(main, alive, query) {
  const params = query || new URLSearchParams();
  const state = { q: params.get('q') || '', label: params.get('label') || '',
    enabled: params.get('enabled') || '', last: params.get('last') || '',
    sort: params.get('sort') || 'name', order: params.get('order') || 'asc',
    page: Math.max(1, Number(params.get('page')) || 1) };
  const picked = new Set();
  heading(main, t('nav.tasks'),
    h('a.btn.primary', { href: '#/tasks/new' }, t('tasks.new')), refreshBtn(() => load()));
  const go = (patch) => {
    Object.assign(state, patch);
    const keep = Object.entries(state).filter(([k, v]) => v && !(k === 'page' && v === 1)
      && !(k === 'sort' && v === 'name') && !(k === 'order' && v === 'asc'));
    location.hash = '#/tasks' + (keep.length ? '?' + new URLSearchParams(keep) : '');
  };
  const search = h('input', { type: 'search', value: state.q, 'data-role': 'search',
    placeholder: t('tasklist.search'), 'aria-label': t('tasklist.search') });
  let timer = 0;
  search.addEventListener('input', () => {
    clearTimeout(timer);
    timer = setTimeout(() => go({ q: search.value.trim(), page: 1 }), 350);
  });
  onLeave(() => clearTimeout(timer));
  const select = (role, value, options) => h('select', { 'data-role': role,
    'aria-label': t('tasklist.' + role),
    onchange: (e) => go({ [role]: e.target.value, page: 1 }) },
  options.map(([v, label]) => h('option', { value: v, selected: v === value }, label)));
  const labelSel = select('label', state.label, [['', t('tasklist.anyLabel')]]);
  const bar = h('div.filters',
    search, labelSel,
    select('enabled', state.enabled, [['', t('tasklist.anyState')],
      ['true', t('tasklist.onlyOn')], ['false', t('tasklist.onlyOff')]]),
    select('last', state.last, [['', t('tasklist.anyLast')], ['failed', t('tasklist.lastFailed')]]),
    select('sort', state.sort, [['name', t('tasklist.byName')], ['next', t('tasklist.byNext')],
      ['last_run', t('tasklist.byLast')], ['created', t('tasklist.byCreated')]]),
    select('order', state.order, [['asc', t('tasklist.asc')], ['desc', t('tasklist.desc')]]));
  const bulk = h('div.bulk', { 'data-role': 'bulk' },
    ['run', 'enable', 'disable', 'delete'].map((what) => btn(t('tasklist.bulk.' + what),
      guarded(() => bulkDo(what)), what === 'delete' ? 'small danger-ghost' : 'small',
      { 'data-bulk': what })));
  const body = h('div.card', { 'aria-busy': 'true' }, loading());
  const internalBox = h('details.internal', { 'data-role': 'internal', hidden: true },
    h('summary', t('tasklist.internal')), h('div'));
  main.append(bar, bulk, body, internalBox);

  async function bulkDo(what) {
    const ids = [...picked];
    if (!ids.length) { notify(t('tasklist.nonePicked'), 'error'); return; }
    if (!await confirmDialog(t('tasklist.bulk.' + what),
      t('tasklist.bulkBody', { n: ids.length }), t('tasklist.bulk.' + what), what === 'delete')) return;
    for (const id of ids) {
      if (what === 'run') await api('POST', apiPath('tasks', id, 'runs')).catch(() => null);
      else if (what === 'delete') await api('DELETE', apiPath('tasks', id));
      else await api('PUT', apiPath('tasks', id), { enabled: what === 'enable' });
    }
    notify(t('tasklist.bulkDone', { n: ids.length }), 'ok');
    picked.clear();
    await load();
  }

  let loadSeq = 0; // only the latest load may paint
  let internalLoaded = false;
  async function load() {
    const mine = ++loadSeq;
    const current = () => alive() && mine === loadSeq;
    body.setAttribute('aria-busy', 'true');
    let res;
    try {
      res = await api('GET', '/task-list' + q({ q: state.q, label: state.label,
        enabled: state.enabled, last: state.last, sort: state.sort, order: state.order,
        limit: PAGE, offset: (state.page - 1) * PAGE }));
    } catch (e) {
      if (current()) { body.removeAttribute('aria-busy'); failBox(body, e); }
      return;
    }
    if (!current()) return;
    knowZone(res.zone);
    body.removeAttribute('aria-busy');
    fill(labelSel, h('option', { value: '' }, t('tasklist.anyLabel')),
      res.labels.map((l) => h('option', { value: l, selected: l === state.label }, l)));
    internalBox.hidden = !res.internal_total;
    internalBox.querySelector('summary').textContent =
      t('tasklist.internal') + ` (${res.internal_total})`;
    if (!res.all_total) {
      bar.hidden = true; bulk.hidden = true;
      fill(body, firstPage());
      return;
    }
    const cols = [t('tasklist.pickCol'), t('tasks.col.name'), t('tasks.col.schedule'),
      t('tasklist.recent'), t('tasks.col.actions')];
    const pages = Math.max(1, Math.ceil(res.total / PAGE));
    fill(body,
      res.items.length
        ? grid(t('nav.tasks'), cols, res.items.map((task) => taskRow(task, cols, load, picked, res.zone)),
          { class: 'tasklist' })
        : h('p.empty', t('tasklist.noMatch')),
      h('nav.pager', { 'aria-label': t('tasklist.pages') },
        btn(t('tasklist.prev'), () => go({ page: state.page - 1 }), 'small',
          { disabled: state.page <= 1, 'data-action': 'prev' }),
        h('span.muted', { 'data-role': 'page' },
          t('tasklist.pageOf', { page: state.page, pages, total: res.total })),
        btn(t('tasklist.next'), () => go({ page: state.page + 1 }), 'small',
          { disabled: state.page >= pages, 'data-action': 'next' })));
  }
  internalBox.addEventListener('toggle', guarded(async () => {
    if (!internalBox.open || internalLoaded) return;
    const res = await api('GET', '/task-list' + q({ internal: 'true', limit: 100 }));
    internalLoaded = true;
    const cols = [t('tasks.col.name'), t('tasks.col.schedule'), t('tasklist.recent')];
    fill(internalBox.querySelector('div'), grid(t('tasklist.internal'), cols,
      res.items.map((task) => row({ 'data-task-id': task.id }, cols,
        h('a', { href: '#/tasks/' + task.id }, task.name),
        task.schedule ? h('code', task.schedule) : h('span.muted', t('tasks.manual')),
        strip(task)))));
  }));
  // Live refresh: a cheap poll of the one list request while the page is visible.
  const poll = setInterval(() => {
    if (alive() && document.visibilityState === 'visible') load();
  }, 10000);
  onLeave(() => clearInterval(poll));
  load();
}

export { viewTasks, firstPage };
