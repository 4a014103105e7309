/* qledge panel: notifications (#/notifications): channels with "send test", rules, deliveries.
 * A channel's form (the service picker) is panel/channel_form.js. */
import { t, h, fill, btn, rowBtn, actionsCell, field, loading, grid, row, guarded, apiPath, notify,
  confirmDialog, api, heading, failBox, fmtTime, refreshBtn } from './core.js';
import { channelForm, services, svcName } from './channel_form.js';
import { mountNotifySettings } from './notify_settings.js';
const ST = ['failed', 'timed_out', 'lost', 'blocked', 'succeeded'];
const BADGE = { sent: 'succeeded', retrying: 'timed_out', pending: 'queued', given_up: 'failed',
  held: 'queued', digested: 'succeeded' };
const chPath = (...p) => apiPath('notifications', 'channels', ...p);
const input = (id, props) => h('input', { id, autocomplete: 'off', ...props });
const check = (id, label, on) => {
  const el = input(id, { type: 'checkbox', checked: on });
  return [el, h('div.field.check', el, h('label', { htmlFor: id }, label))];
};
// Shows an API error in `box` (null: none).
const say = (box, ex) => { box.textContent = ex ? ex.message : ''; box.hidden = !ex; };

// The service: the picker's name and which secrets are set (never a value), or the scheme.
function serviceCell(ch, list) {
  const svc = list.find((s) => s.id === ch.picker);
  if (!svc) return h('code', ch.service);
  const secrets = Object.entries(ch.secrets || {}).map(([k, on]) =>
    `${t('svc.f.' + k)}: ${t(on ? 'svc.set' : 'svc.unset')}`).join(' · ');
  return h('span', { 'data-service': svc.id }, svcName(svc),
    secrets ? h('span.small.muted', { 'data-role': 'secrets' }, ' — ' + secrets) : null);
}

const channelRow = (ch, cols, reload, list) => row({ 'data-channel': ch.name }, cols, ch.name,
  serviceCell(ch, list),
  h('span', { class: ch.enabled ? 'on' : 'off' }, t(ch.enabled ? 'envs.on' : 'envs.off')),
  actionsCell(cols[3],
    rowBtn(t('notify.test'), ch.name, guarded(async () => {
      const r = await api('POST', chPath(ch.id, 'test'));
      notify(r.ok ? t('notify.testOk', { name: ch.name }) : r.error, r.ok ? 'ok' : 'error');
    }), 'small'),
    rowBtn(t('common.edit'), ch.name, guarded(() => channelForm(reload, ch)), 'small'),
    rowBtn(t(ch.enabled ? 'tasks.disable' : 'tasks.enable'), ch.name, guarded(async () => {
      await api('PATCH', chPath(ch.id), { enabled: !ch.enabled });
      reload();
    }), 'small'),
    rowBtn(t('common.delete'), ch.name, guarded(async () => {
      if (!await confirmDialog(t('common.delete'), ch.name, t('common.delete'), true)) return;
      await api('DELETE', chPath(ch.id));
      reload();
    }), 'small danger-ghost')));

function rulesForm(box, r) {
  const boxes = ST.map((s) => check('r-' + s, t('status.' + s), r.statuses.includes(s)));
  const [recI, recF] = check('r-rec', t('notify.recovered'), r.recovered);
  const [diskI, diskF] = check('r-disk', t('notify.disk'), r.disk_pressure);
  const num = (id, v, max) => input(id, { type: 'number', min: 0, max, value: v });
  const hm = (id, v) => input(id, { type: 'text', value: v || '', placeholder: 'HH:MM',
    class: 'mono', size: 6 });
  const [streakI, linesI, qsI, qeI] = [num('r-streak', r.streak, 100),
    num('r-lines', r.log_lines, 50), hm('r-qs', r.quiet_start), hm('r-qe', r.quiet_end)];
  const err = h('div.alert.error', { role: 'alert', hidden: true });
  const form = h('form.form', { novalidate: true },
    h('h2', t('notify.rules')), err,
    h('fieldset', h('legend', t('notify.on')), boxes.map((b) => b[1])), recF, diskF,
    field('r-streak', t('notify.streak'), streakI),
    field('r-lines', t('notify.lines'), linesI, t('notify.linesHelp')),
    field('r-qs', t('notify.quiet') + ' ⟶', qsI), field('r-qe', '⟶ ' + t('notify.quiet'), qeI),
    h('div.actions', h('button.btn.primary', { type: 'submit' },
      t('common.save'))));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    say(err, null);
    try {
      await api('PUT', '/notifications/rules', { ...r,
        statuses: ST.filter((s, i) => boxes[i][0].checked), recovered: recI.checked,
        disk_pressure: diskI.checked, streak: Number(streakI.value) || 0,
        log_lines: Number(linesI.value) || 0, quiet_start: qsI.value.trim() || null,
        quiet_end: qeI.value.trim() || null });
      notify(t('notify.saved'), 'ok');
    } catch (ex) { say(err, ex); }
  });
  fill(box, form);
}

function viewNotify(main, alive) {
  const [chans, rules, sent] = [0, 1, 2].map(() => h('div.card', loading()));
  async function load() {
    let c; let r; let m; let list;
    try {
      [c, r, m, list] = await Promise.all([api('GET', chPath()), api('GET', '/notifications/rules'),
        api('GET', '/notifications/messages?limit=30'), services()]);
    } catch (e) {
      if (alive()) failBox(chans, e);
      return;
    }
    if (!alive()) return;
    const cc = [t('tasks.col.name'), t('notify.service'), t('envs.state'), t('tasks.col.actions')];
    fill(chans, h('h2', t('notify.channels')), c.items.length
      ? grid(null, cc, c.items.map((ch) => channelRow(ch, cc, load, list)))
      : h('p.empty', t('notify.none')));
    rulesForm(rules, r.global);
    const names = Object.fromEntries(c.items.map((ch) => [ch.id, ch.name]));
    const mc = ['', t('notify.msg'), t('notify.channel'), t('envs.state'), '#', ''];
    fill(sent, h('h2', t('notify.recent')), m.items.length
      ? grid(null, mc, m.items.map((x) => row({ 'data-state': x.state }, mc,
        fmtTime(x.created_at_ms), x.title, names[x.channel_id] || x.channel_id,
        h('span', { class: `badge badge-${BADGE[x.state]}` }, t('notify.st.' + x.state)),
        String(x.tries), x.error || '')))
      : h('p.empty', '—'));
  }
  heading(main, t('nav.notifications'), refreshBtn(load),
    btn(t('notify.new'), guarded(() => channelForm(load, null)), 'primary'));
  main.append(h('p.muted', t('notify.intro')), chans, rules, sent);
  mountNotifySettings(main, alive);
  load();
}

export { viewNotify };
