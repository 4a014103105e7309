/* qledge panel: a task's "Mute notifications" switch, under its editor (#/tasks/<id>).
 * It sets the task's rules override's `muted` (docs/notifications.md): other fields of
 * the override are kept; unmuting an override that only muted removes it. */
import { t, h, fill, api, apiPath, notify, failBox } from './core.js';

async function toggle(task, el) {
  const path = apiPath('notifications', 'rules', 'tasks', task.id);
  const own = (await api('GET', '/notifications/rules')).tasks[task.id] || {};
  const { muted, ...rest } = own;
  if (el.checked) await api('PUT', path, { ...rest, muted: true });
  else if (Object.keys(rest).length) await api('PUT', path, rest);
  else await api('DELETE', path);
  notify(t(el.checked ? 'mute.on' : 'mute.off', { name: task.name }), 'ok');
}

function taskMute(task) {
  const box = h('div.card', { 'data-section': 'task-mute' });
  api('GET', '/notifications/rules').then((r) => {
    const el = h('input', { id: 'f-mute', type: 'checkbox',
      checked: Boolean((r.tasks[task.id] || {}).muted), 'aria-describedby': 'f-mute-help' });
    el.addEventListener('change', async () => {
      el.disabled = true;
      try { await toggle(task, el); } catch (ex) {
        el.checked = !el.checked;
        notify(ex.message, 'error');
      } finally { el.disabled = false; }
    });
    fill(box, h('h2', t('mute.title')),
      h('div.field.check', el, h('label', { htmlFor: 'f-mute' }, t('mute.label'))),
      h('p.muted', { id: 'f-mute-help' }, t('mute.help')));
  }, (e) => failBox(box, e));
  return box;
}

export { taskMute };
