/* qledge panel: the task list (#/tasks). */
import { t, fmtTime, fmtRelative, placeText, h, badge, rowBtn, actionsCell, loading,
  refreshBtn, grid, row, guarded, apiPath, notify, confirmDialog, api, q, loadAllTasks, heading,
  failBox, fill } from './core.js';

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

function taskRow(task, last, cols, reload) {
  const sched = task.schedule
    ? [h('code', task.schedule), h('div.muted.small', task.next_fire_at_ms
      ? t('tasks.next', { when: fmtTime(task.next_fire_at_ms),
        rel: fmtRelative(task.next_fire_at_ms) }) : t('tasks.paused'))]
    : h('span.muted', t('tasks.manual'));
  const lastCell = last
    ? h('a.plain', { href: '#/runs/' + last.id }, badge(last.status),
      last.exit_code != null ? h('span.exit', t('runs.exit', { code: last.exit_code })) : null,
      h('div.muted.small', fmtTime(last.created_at_ms)))
    : h('span.muted', t('tasks.never'));
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
  const link = (label, href, extra) => h('a.btn.small', { href, ...extra,
    'aria-label': `${label} — ${task.name}` }, label);
  return row({ 'data-task-id': task.id, 'data-task-name': task.name }, cols,
    [h('a.strong', { href: '#/tasks/' + task.id }, task.name),
      task.labels.length ? h('div.labels', task.labels.map((l) => h('span.label', l))) : null,
      placeText(task.placement) && h('div.muted.small', { 'data-role': 'placement' },
        t('place.title') + ': ' + placeText(task.placement))],
    sched,
    lastCell,
    h('span', { class: task.enabled ? 'on' : 'off' }, task.enabled ? t('common.yes') : t('common.no')),
    actionsCell(cols[4],
      rowBtn(t('tasks.run'), task.name, () => runNow(task), 'small primary', { 'data-action': 'run' }),
      toggle,
      link(t('common.edit'), '#/tasks/' + task.id, { 'data-action': 'edit' }),
      link(t('nav.runs'), '#/runs?task_id=' + task.id),
      del));
}

function viewTasks(main, alive) {
  heading(main, t('nav.tasks'),
    h('a.btn.primary', { href: '#/tasks/new' }, t('tasks.new')), refreshBtn(load));
  const body = h('div.card', { 'aria-busy': 'true' }, loading());
  main.append(body);

  let loadSeq = 0; // only the latest load may paint
  async function load() {
    const mine = ++loadSeq;
    const current = () => alive() && mine === loadSeq;
    body.setAttribute('aria-busy', 'true');
    let tasks;
    let lasts;
    try {
      tasks = await loadAllTasks();
      lasts = await Promise.all(tasks.map((task) =>
        api('GET', '/runs' + q({ task_id: task.id, limit: 1 }))
          .then((r) => r.items[0] || null, () => null)));
    } catch (e) {
      if (current()) { body.removeAttribute('aria-busy'); failBox(body, e); }
      return;
    }
    if (!current()) return;
    body.removeAttribute('aria-busy');
    if (!tasks.length) {
      fill(body, h('p.empty', t('tasks.empty'), ' ',
        h('a', { href: '#/tasks/new' }, t('tasks.emptyLink'))));
      return;
    }
    const cols = [t('tasks.col.name'), t('tasks.col.schedule'), t('tasks.col.last'),
      t('tasks.col.enabled'), t('tasks.col.actions')];
    fill(body, grid(t('nav.tasks'), cols, tasks.map((task, i) => taskRow(task, lasts[i], cols,
      load))));
  }
  load();
}

export { viewTasks };
