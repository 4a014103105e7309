/* qledge panel: the notifications' message settings on #/notifications — the language
 * messages are written in, the public base URL their run links use, when a task notifies
 * and the rate limit per channel (docs/notifications.md, "Quiet by default"). */
import { t, h, fill, field, loading, api, notify, locale, failBox } from './core.js';
const LANGS = [['en', 'English'], ['zh-CN', '简体中文']];
const MODES = ['transitions', 'every_run'];
const panelLang = () => (locale() === 'zh-CN' ? 'zh-CN' : 'en');
const say = (box, ex) => { box.textContent = ex ? ex.message : ''; box.hidden = !ex; };
const select = (id, options, value) => h('select', { id }, options.map(([v, label]) =>
  h('option', { value: v, selected: v === value }, label)));

function form(box, s, rules) {
  const langI = select('s-lang', LANGS, s.language || panelLang());
  const baseI = h('input.mono', { id: 's-base', type: 'url', autocomplete: 'off',
    spellcheck: 'false', value: s.base_url || '', placeholder: 'http://pi.local:5700' });
  const modeI = select('s-mode', MODES.map((m) => [m, t('nset.mode.' + m)]), rules.mode);
  const num = (id, v, min, max) => h('input', { id, type: 'number', min, max, value: v });
  const rateI = num('s-rate', rules.rate_limit, 0, 100);
  const winI = num('s-window', Math.max(1, Math.round(rules.rate_window_s / 60)), 1, 1440);
  const now = h('p.muted', { 'data-role': 'rate-now' });
  const show = (r) => { now.textContent = r.rate_limit ? t('nset.rateNow',
    { n: r.rate_limit, m: Math.round(r.rate_window_s / 60) }) : t('nset.rateOff'); };
  show(rules);
  const err = h('div.alert.error', { role: 'alert', hidden: true });
  const f = h('form.form', { novalidate: true, 'data-form': 'notify-settings' },
    h('h2', t('nset.title')), err,
    field('s-lang', t('nset.lang'), langI, t('nset.langHelp')),
    field('s-base', t('nset.base'), baseI, t('nset.baseHelp')),
    field('s-mode', t('nset.mode'), modeI),
    field('s-rate', t('nset.rate'), rateI), field('s-window', t('nset.window'), winI), now,
    h('div.actions', h('button.btn.primary', { type: 'submit' }, t('nset.apply'))));
  f.addEventListener('submit', async (e) => {
    e.preventDefault();
    say(err, null);
    try {
      // The rules are one document: what this form does not own is sent back as it was.
      const cur = (await api('GET', '/notifications/rules')).global;
      const next = { ...cur, mode: modeI.value, rate_limit: Number(rateI.value) || 0,
        rate_window_s: (Number(winI.value) || 1) * 60 };
      await api('PUT', '/notifications/rules', next);
      await api('PUT', '/notifications/settings',
        { language: langI.value, base_url: baseI.value.trim() });
      show(next);
      notify(t('nset.saved'), 'ok');
    } catch (ex) { say(err, ex); }
  });
  fill(box, f);
}

// Mounted by notifications.js. Messages are English until the language is set: the
// first time this page opens, it becomes the panel's own language.
function mountNotifySettings(main, alive) {
  const box = h('div.card', { 'data-section': 'notify-settings' }, loading());
  main.append(box);
  (async () => {
    let s = await api('GET', '/notifications/settings');
    if (!s.language) s = await api('PUT', '/notifications/settings', { language: panelLang() });
    const rules = (await api('GET', '/notifications/rules')).global;
    if (alive()) form(box, s, rules);
  })().catch((e) => { if (alive()) failBox(box, e); });
}

export { mountNotifySettings };
