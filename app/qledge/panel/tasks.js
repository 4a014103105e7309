/* qledge panel: the task list (#/tasks). */
'use strict';
(() => {
  const { t, fmtTime, fmtRelative, h, clear, badge, btn, actionsCell, notify, confirmDialog,
    api, q, loadAllTasks, heading, failBox } = window.QLEDGE;

  async function runNow(task) {
    try {
      const res = await api('POST', `/tasks/${encodeURIComponent(task.id)}/runs`);
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

  // One row of the task list; `reload` repaints the list after a change.
  function taskRow(task, last, cols, reload) {
    const sched = task.schedule
      ? [h('code', null, task.schedule), h('div', { class: 'muted small' },
        task.next_fire_at_ms ? t('tasks.next', { when: fmtTime(task.next_fire_at_ms),
          rel: fmtRelative(task.next_fire_at_ms) }) : t('tasks.paused'))]
      : h('span', { class: 'muted' }, t('tasks.manual'));
    const lastCell = last
      ? h('a', { href: '#/runs/' + last.id, class: 'plain' }, badge(last.status),
        last.exit_code != null ? h('span', { class: 'exit' }, t('runs.exit', { code: last.exit_code })) : null,
        h('div', { class: 'muted small' }, fmtTime(last.created_at_ms)))
      : h('span', { class: 'muted' }, t('tasks.never'));
    const toggle = btn(task.enabled ? t('tasks.disable') : t('tasks.enable'), async () => {
      try {
        await api('PUT', `/tasks/${encodeURIComponent(task.id)}`, { enabled: !task.enabled });
        notify(t(task.enabled ? 'tasks.disabled' : 'tasks.enabled', { name: task.name }), 'ok');
        await reload();
      } catch (e) { notify(e.message, 'error'); }
    }, 'small', { 'data-action': 'toggle',
      'aria-label': `${task.enabled ? t('tasks.disable') : t('tasks.enable')} — ${task.name}` });
    const del = btn(t('common.delete'), async () => {
      const ok = await confirmDialog(t('tasks.deleteTitle'),
        t('tasks.deleteBody', { name: task.name }), t('common.delete'), true);
      if (!ok) return;
      try {
        await api('DELETE', `/tasks/${encodeURIComponent(task.id)}`);
        notify(t('tasks.deleted', { name: task.name }), 'ok');
        await reload();
      } catch (e) { notify(e.message, 'error'); }
    }, 'small danger-ghost', { 'data-action': 'delete',
      'aria-label': `${t('common.delete')} — ${task.name}` });
    return h('tr', { 'data-task-id': task.id, 'data-task-name': task.name },
      h('td', { 'data-label': cols[0] }, h('a', { href: '#/tasks/' + task.id, class: 'strong' },
        task.name), task.labels.length ? h('div', { class: 'labels' },
        task.labels.map((l) => h('span', { class: 'label' }, l))) : null),
      h('td', { 'data-label': cols[1] }, sched),
      h('td', { 'data-label': cols[2] }, lastCell),
      h('td', { 'data-label': cols[3] }, h('span', { class: task.enabled ? 'on' : 'off' },
        task.enabled ? t('common.yes') : t('common.no'))),
      actionsCell(cols[4],
        btn(t('tasks.run'), () => runNow(task), 'small primary',
          { 'data-action': 'run', 'aria-label': `${t('tasks.run')} — ${task.name}` }),
        toggle,
        h('a', { class: 'btn small', href: '#/tasks/' + task.id, 'data-action': 'edit',
          'aria-label': `${t('common.edit')} — ${task.name}` }, t('common.edit')),
        h('a', { class: 'btn small', href: '#/runs?task_id=' + task.id,
          'aria-label': `${t('tasks.runs')} — ${task.name}` }, t('tasks.runs')),
        del));
  }

  function viewTasks(main, alive) {
    heading(main, t('tasks.title'),
      h('a', { class: 'btn primary', href: '#/tasks/new' }, t('tasks.new')),
      btn(t('common.refresh'), () => load(), 'ghost', { 'data-action': 'refresh' }));
    const body = h('div', { class: 'card', 'aria-busy': 'true' }, h('p', { class: 'muted' },
      t('common.loading')));
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
        if (!current()) return;
        clear(body).removeAttribute('aria-busy');
        failBox(body, e);
        return;
      }
      if (!current()) return;
      clear(body).removeAttribute('aria-busy');
      if (!tasks.length) {
        body.append(h('p', { class: 'empty' }, t('tasks.empty'), ' ',
          h('a', { href: '#/tasks/new' }, t('tasks.emptyLink'))));
        return;
      }
      const cols = [t('tasks.col.name'), t('tasks.col.schedule'), t('tasks.col.last'),
        t('tasks.col.enabled'), t('tasks.col.actions')];
      const rows = tasks.map((task, i) => taskRow(task, lasts[i], cols, load));
      body.append(h('table', { class: 'grid' },
        h('caption', { class: 'sr-only' }, t('tasks.title')),
        h('thead', null, h('tr', null, cols.map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', null, rows)));
    }
    load();
  }

  window.QLEDGE.pages.tasks = viewTasks;
})();
