/* qledge panel: subscriptions (#/subs), docs/subscriptions.md. */
import { t, h, clear, fill, btn, rowBtn, actionsCell, field, markField, unmark, loading, grid, row,
  guarded, apiPath, notify, confirmDialog, api, heading, failBox } from './core.js';
const TEXT = ['name', 'url', 'branch', 'alias', 'schedule', 'default_schedule', 'whitelist',
  'blacklist', 'dependences', 'username', 'secret'];
const NULLS = new Set(['branch', 'schedule', 'default_schedule', 'username', 'secret']);

// The secret is write-only: left empty on edit, it stays.
function subForm(box, sub, reload) {
  clear(box);
  const ins = {};
  const fields = TEXT.map((k) => {
    const v = sub && k !== 'secret' ? sub[k] : '';
    ins[k] = h('input.mono', { id: 's-' + k, type: k === 'secret' ? 'password' : 'text',
      value: v == null ? '' : v, autocomplete: 'off', spellcheck: 'false',
      disabled: k === 'alias' && !!sub });
    return field('s-' + k, t('subs.f.' + k), ins[k], k === 'secret' && sub && sub.has_secret
      ? t('subs.secretKept') : null, k);
  });
  const opt = (v, on, label) => h('option', { value: v, selected: on }, label || v);
  const type = h('select', { id: 's-type', disabled: !!sub },
    ['git', 'file'].map((v) => opt(v, sub && sub.type === v)));
  const vanished = h('select', { id: 's-vanished' }, ['delete', 'disable'].map((v) =>
    opt(v, sub && sub.vanished === v, t('subs.v.' + v))));
  const err = h('div.alert.error', { role: 'alert', hidden: true });
  const form = h('form.card.form', { novalidate: true },
    h('h2', sub ? sub.name : t('subs.new')), err,
    field('s-type', t('subs.f.type'), type, null, 'type'), fields,
    field('s-vanished', t('subs.f.vanished'), vanished, null, 'vanished'),
    h('div.actions', h('button.btn.primary', { type: 'submit' },
      t('common.save')), btn(t('common.cancel'), () => clear(box), 'ghost')));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    unmark(form, err);
    const body = { vanished: vanished.value };
    for (const k of TEXT) {
      const v = ins[k].value.trim();
      if (sub && (k === 'alias' || (k === 'secret' && !v))) continue;
      body[k] = v || (NULLS.has(k) ? null : v);
    }
    if (!sub) body.type = type.value;
    try {
      if (sub) await api('PATCH', apiPath('subscriptions', sub.id), body);
      else await api('POST', '/subscriptions', body);
      notify(t('subs.saved'), 'ok');
      clear(box);
      reload();
    } catch (ex) {
      markField(form, err, ex.field, ex.message).focus();
    }
  });
  box.append(form);
}

function lastPull(sub) {
  const s = sub.last_sync;
  if (!s) return sub.last_run_id ? t('subs.pending') : '—';
  const link = h('a', { href: '#/runs/' + s.run_id }, t('status.' + s.status));
  if (!s.added) return link;
  return h('span', link, ' ', t('subs.counts', { a: s.added.length,
    c: s.changed.length, r: s.removed.length }));
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
    const cols = [t('subs.f.name'), t('subs.f.alias'), t('subs.f.url'), t('subs.f.schedule'),
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
          }), 'small danger-ghost'))))));
  }
  load();
}

export { viewSubs };
