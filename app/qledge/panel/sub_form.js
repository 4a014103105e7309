/* qledge panel: the subscription form — every field of the API (http/subscriptions.py,
 * SubscriptionIn), help for the patterns and schedules, and a preview of both schedules
 * from the same endpoint the task editor uses (GET /cron/preview). */
import { t, h, clear, fill, btn, field, markField, unmark, api, apiPath, notify, q, fmtTime,
  onLeave } from './core.js';

const TEXT = ['name', 'url', 'branch', 'alias', 'schedule', 'default_schedule', 'whitelist',
  'blacklist', 'dependences', 'sub_before', 'sub_after', 'username', 'secret'];
const NULLS = new Set(['branch', 'schedule', 'default_schedule', 'username', 'secret']);
const CHECKS = ['enabled', 'auto_add', 'auto_delete'];
const CAPS = ['repo_bytes', 'files', 'file_bytes', 'timeout_s'];
const HELP = { whitelist: 'subs.h.whitelist', blacklist: 'subs.h.blacklist',
  dependences: 'subs.h.dependences', default_schedule: 'subs.h.default_schedule',
  schedule: 'subs.h.schedule', extensions: 'subs.h.extensions', sub_before: 'subs.h.hooks',
  auto_delete: 'subs.h.auto_delete', caps: 'subs.h.caps' };
const DEFAULTS = { enabled: true, auto_add: true, auto_delete: true };

// The next fire times of `input`'s schedule under it (debounced; stale answers dropped).
function preview(input, out) {
  let seq = 0;
  let timer = 0;
  const now = () => {
    const expr = input.value.trim();
    const mine = ++seq;
    if (!expr) { clear(out); return; }
    api('GET', '/cron/preview' + q({ schedule: expr, n: 3 })).then((r) => {
      if (mine !== seq) return;
      fill(out, h('span.muted', t('subs.next', { tz: r.timezone }) + ' '),
        r.next.map((n, i) => [i ? ' · ' : '', h('time', { datetime: n.at }, fmtTime(n.at_ms, r.timezone))]));
    }, (e) => { if (mine === seq) fill(out, h('span.preview-error', e.message)); });
  };
  input.addEventListener('input', () => { clearTimeout(timer); timer = setTimeout(now, 300); });
  onLeave(() => clearTimeout(timer));
  now();
}

const check = (id, label, on, help) => {
  const el = h('input', { id, type: 'checkbox', checked: on });
  return [el, h('div.field.check', { 'data-field': id.slice(2) }, el,
    h('label', { htmlFor: id }, label), help ? h('p.help', help) : null,
    h('p.field-error', { id: id + '-err', hidden: true }))];
};

// The secret is write-only: left empty on edit, it stays.
function subForm(box, sub, reload) {
  clear(box);
  const ins = {};
  const val = (k, d) => (sub && sub[k] != null ? sub[k] : d);
  const texts = TEXT.map((k) => {
    const v = k !== 'secret' ? val(k, '') : '';
    ins[k] = h('input.mono', { id: 's-' + k, type: k === 'secret' ? 'password' : 'text',
      value: v, autocomplete: 'off', spellcheck: 'false', disabled: k === 'alias' && !!sub });
    const help = k === 'secret' && sub && sub.has_secret ? t('subs.secretKept')
      : HELP[k] ? t(HELP[k]) : null;
    const f = field('s-' + k, t('subs.f.' + k), ins[k], help, k);
    if (k === 'schedule' || k === 'default_schedule') {
      const out = h('p.small', { id: `s-${k}-preview`, 'aria-live': 'polite' });
      f.append(out);
      preview(ins[k], out);
    }
    return f;
  });
  const ext = h('input.mono', { id: 's-extensions', type: 'text', autocomplete: 'off',
    value: val('extensions', ['js', 'mjs', 'py', 'sh']).join(' ') });
  const checks = CHECKS.map((k) => check('s-' + k, t('subs.f.' + k), val(k, DEFAULTS[k]),
    HELP[k] && t(HELP[k])));
  const caps = CAPS.map((k) => h('input', { id: 's-cap-' + k, type: 'number', min: 1,
    value: sub ? sub.caps[k] : '' , placeholder: sub ? '' : t('subs.default') }));
  const opt = (v, on, label) => h('option', { value: v, selected: on }, label || v);
  const type = h('select', { id: 's-type', disabled: !!sub },
    ['git', 'file'].map((v) => opt(v, sub && sub.type === v)));
  const vanished = h('select', { id: 's-vanished' }, ['delete', 'disable'].map((v) =>
    opt(v, sub && sub.vanished === v, t('subs.v.' + v))));
  const err = h('div.alert.error', { role: 'alert', hidden: true });
  const form = h('form.card.form', { novalidate: true },
    h('h2', sub ? sub.name : t('subs.new')), err,
    field('s-type', t('subs.f.type'), type, null, 'type'), texts,
    field('s-extensions', t('subs.f.extensions'), ext, t(HELP.extensions), 'extensions'),
    checks.map((c) => c[1]),
    field('s-vanished', t('subs.f.vanished'), vanished, null, 'vanished'),
    h('fieldset.field', { 'data-field': 'caps' }, h('legend', t('subs.f.caps')),
      h('p.help', t(HELP.caps)),
      CAPS.map((k, i) => field('s-cap-' + k, t('subs.cap.' + k), caps[i], null, 'caps.' + k))),
    h('div.actions', h('button.btn.primary', { type: 'submit' },
      t('common.save')), btn(t('common.cancel'), () => clear(box), 'ghost')));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    unmark(form, err);
    const body = { vanished: vanished.value,
      extensions: ext.value.split(/[\s,]+/).map((x) => x.replace(/^\./, '')).filter(Boolean) };
    for (const k of TEXT) {
      const v = ins[k].value.trim();
      if (sub && (k === 'alias' || (k === 'secret' && !v))) continue;
      body[k] = v || (NULLS.has(k) ? null : v);
    }
    CHECKS.forEach((k, i) => { body[k] = checks[i][0].checked; });
    if (caps.some((c) => c.value.trim())) {
      body.caps = Object.fromEntries(CAPS.map((k, i) => [k, Number(caps[i].value) ||
        (sub ? sub.caps[k] : undefined)]).filter(([, v]) => v !== undefined));
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

export { subForm };
