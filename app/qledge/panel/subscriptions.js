/* qledge panel: subscriptions (#/subs), docs/subscriptions.md; the form is panel/sub_form.js. */
import { t, h, fill, btn, rowBtn, actionsCell, loading, grid, row, guarded, apiPath,
  confirmDialog, api, heading, failBox } from './core.js';
import { subForm } from './sub_form.js';
// The scripts the last pull left without a task, each with its reason in words.
function noTask(s) {
  const items = s.no_task || [];
  if (!items.length) return null;
  const more = (s.no_task_count || items.length) - items.length;
  return h('details.no-task', { 'data-role': 'no-task' },
    h('summary', t('subs.noTask', { n: s.no_task_count || items.length })),
    h('ul', items.map((x) => h('li', h('code', x.path), ' — ', t('subs.why.' + x.reason))),
      more > 0 ? h('li', t('subs.more', { n: more })) : null));
}

function lastPull(sub) {
  const s = sub.last_sync;
  if (!s) return sub.last_run_id ? t('subs.pending') : '—';
  const link = h('a', { href: '#/runs/' + s.run_id }, t('status.' + s.status));
  if (!s.added) return link;
  return h('div', h('span', link, ' ', t('subs.counts', { a: s.added.length,
    c: s.changed.length, r: s.removed.length })), noTask(s));
}

function viewSubs(main, alive) {
  heading(main, t('nav.subs'), btn(t('subs.new'), () => subForm(box, null, load), 'primary',
    { 'data-action': 'new-sub' }));
  main.append(h('p.muted', t('subs.intro')));
  const box = h('div');
  const list = h('div.card', loading());
  main.append(box, list);
  async function load() {
    let subs;
    try {
      subs = (await api('GET', '/subscriptions')).items;
    } catch (e) {
      if (alive()) failBox(list, e);
      return;
    }
    if (!alive()) return;
    const cols = [t('subs.f.name'), t('subs.f.alias'), t('subs.f.url'), t('subs.col.schedule'),
      t('subs.last'), t('tasks.col.actions')];
    fill(list, !subs.length ? h('p.empty', t('subs.empty'))
      : grid(t('nav.subs'), cols, subs.map((s) => row({ 'data-sub': s.alias }, cols,
        s.name, h('code', s.alias), h('code.wrap', s.url),
        s.schedule || '—', lastPull(s), actionsCell(cols[5],
          rowBtn(t('subs.pull'), s.name, guarded(async () => {
            const r = await api('POST', apiPath('subscriptions', s.id, 'pull'));
            location.hash = '#/runs/' + r.run_id;
          }), 'small primary'),
          rowBtn(t('common.edit'), s.name, () => subForm(box, s, load), 'small'),
          rowBtn(t('common.delete'), s.name, guarded(async () => {
            if (!await confirmDialog(t('subs.deleteTitle'), t('subs.deleteBody',
              { name: s.name }), t('common.delete'), true)) return;
            await api('DELETE', apiPath('subscriptions', s.id));
            load();
          }), 'small danger-ghost')))), { class: 'subs' }));
  }
  load();
}

export { viewSubs };
