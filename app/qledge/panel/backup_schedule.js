/* qledge panel: scheduled backups on the System page (docs/backup.md). */
import { t, h, fill, field, markField, unmark, loading, api, failBox, notify } from './core.js';

function said(ex) {
  const key = 'bs.err.' + ex.code;
  return t(key) === key ? ex.message : t(key, (ex.body || {}).params || {});
}

function scheduleCard() {
  const box = h('div', loading());
  api('GET', '/backup/schedule').then((s) => fill(box, form(s)), (e) => failBox(box, e));
  return h('section.card', { id: 'sys-backup-schedule', 'aria-labelledby': 'sys-h10' },
    h('h2', { id: 'sys-h10' }, t('bs.title')), box);
}

function form(s) {
  const check = (id, on) => h('input', { id, type: 'checkbox', checked: !!on });
  const c = {
    enabled: check('bs-enabled', s.enabled),
    directory: h('input', { id: 'bs-dir', type: 'text', value: s.directory || '',
      placeholder: '/backups' }),
    schedule: h('input.mono', { id: 'bs-cron', type: 'text', value: s.schedule || '0 3 * * *' }),
    keep: h('input', { id: 'bs-keep', type: 'number', min: 1, max: 1000, value: s.keep || 7 }),
    with_logs: check('bs-logs', s.with_logs),
    with_history: check('bs-history', s.with_history),
    passphrase: h('input', { id: 'bs-pass', type: 'password', autocomplete: 'new-password' }),
    clear: check('bs-clear', false),
  };
  const err = h('div.alert.error', { role: 'alert', hidden: true });
  const state = h('p.small.muted', { id: 'bs-state' }, !s.configured ? t('bs.none')
    : [t(s.encrypted ? 'bs.encrypted' : 'bs.plain'), ' ',
      h('a', { href: '#/runs?task_id=' + s.task_id }, t('bs.runs')),
      s.edited ? ' ' + t('bs.edited') : '']);
  const f = h('form.form', { novalidate: true, id: 'bs-form' }, err, state,
    field('bs-enabled', t('bs.enabled'), c.enabled),
    field('bs-dir', t('bs.directory'), c.directory, t('bs.directoryHelp'), 'directory'),
    field('bs-cron', t('bs.schedule'), c.schedule, null, 'schedule'),
    field('bs-keep', t('bs.keep'), c.keep, null, 'keep'),
    field('bs-logs', t('bs.withLogs'), c.with_logs),
    field('bs-history', t('bs.withHistory'), c.with_history),
    field('bs-pass', t('bs.passphrase'), c.passphrase,
      t(s.encrypted ? 'bs.passKeep' : 'bs.passHelp'), 'passphrase'),
    s.encrypted ? field('bs-clear', t('bs.clear'), c.clear) : null,
    h('div.actions', h('button.btn.primary', { type: 'submit' }, t('bs.save'))));
  f.addEventListener('submit', async (e) => {
    e.preventDefault();
    unmark(f, err);
    const body = { enabled: c.enabled.checked, directory: c.directory.value.trim(),
      schedule: c.schedule.value.trim(), keep: Number(c.keep.value),
      with_logs: c.with_logs.checked, with_history: c.with_history.checked };
    if (c.clear.checked) body.passphrase = null; // absent: the current one is kept
    else if (c.passphrase.value) body.passphrase = c.passphrase.value;
    try {
      const saved = await api('PUT', '/backup/schedule', body);
      notify(t('bs.saved'), 'ok');
      f.replaceWith(form(saved));
    } catch (ex) {
      markField(f, err, ex.field, said(ex)).focus();
    }
  });
  return f;
}

export { scheduleCard };
