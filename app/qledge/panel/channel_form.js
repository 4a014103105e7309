/* qledge panel: a notification channel's form — the service picker (the catalogue from
 * GET /notification-services, notifications/services.py) or a hand-written apprise URL.
 * The server builds the URL from the fields; secrets are typed once and never shown
 * again (an edit says which are set, and empty fields keep the current destination). */
import { t, h, btn, field, markField, unmark, api, apiPath, modal } from './core.js';

const OTHER = 'other';
let catalogue = null;
// The catalogue, fetched once a page load (it changes with the code only).
async function services() {
  if (!catalogue) catalogue = (await api('GET', '/notification-services')).items;
  return catalogue;
}
const svcName = (s) => t('svc.n.' + s.id) || s.label;

function control(f, id, kept) {
  if (f.kind === 'choice') {
    return h('select', { id }, f.choices.map((c) => h('option', { value: c }, t('svc.c.' + c))));
  }
  const secret = f.kind === 'secret';
  return h('input', { id, type: secret ? 'password' : 'text', autocomplete: secret ? 'new-password' : 'off',
    spellcheck: 'false', class: f.kind === 'text' ? null : 'mono',
    inputmode: f.kind === 'number' ? 'numeric' : f.kind === 'url' ? 'url' : null,
    placeholder: secret && kept ? t(kept[f.name] ? 'svc.set' : 'svc.unset') : '' });
}

// The fields of `svc` (null: the raw URL) into `box`; returns () => the body's part.
function renderFields(box, svc, kept) {
  box.replaceChildren();
  if (!svc) {
    const url = h('input', { id: 'c-url', type: 'password', class: 'mono', spellcheck: 'false',
      autocomplete: 'off' });
    box.append(field('c-url', t('svc.appriseUrl'), url, t('notify.urlHelp'), 'url'));
    return () => (url.value.trim() || !kept ? { url: url.value } : {});
  }
  if (svc.help) box.append(h('p.help', { 'data-role': 'service-help' }, t(svc.help)));
  const ins = svc.fields.map((f) => {
    const id = 'c-f-' + f.name;
    const el = control(f, id, kept);
    const help = [f.help && t(f.help), !f.required && !f.help && t('svc.optional')]
      .filter(Boolean).join(' ');
    box.append(field(id, t('svc.f.' + f.name), el, help || null, 'fields.' + f.name));
    return [f.name, el];
  });
  if (kept) box.append(h('p.help', t('svc.keep')));
  return () => {
    const fields = Object.fromEntries(ins.map(([n, el]) => [n, el.value.trim()])
      .filter(([, v]) => v !== ''));
    const typed = ins.some(([, el]) => el.tagName === 'INPUT' && el.value.trim());
    return kept && !typed ? {} : { service: svc.id, fields };
  };
}

// New (`ch` null) or edit a channel; `reload` after a save.
async function channelForm(reload, ch) {
  const list = await services();
  const nameI = h('input', { id: 'c-name', type: 'text', autocomplete: 'off', value: ch ? ch.name : '' });
  const pick = h('select', { id: 'c-service' },
    list.map((s) => h('option', { value: s.id }, svcName(s))),
    h('option', { value: OTHER }, t('svc.other')));
  pick.value = ch ? ch.picker || OTHER : list[0].id;
  const box = h('div', { 'data-role': 'service-fields' });
  const kept = (id) => (ch && (ch.picker || OTHER) === id ? ch.secrets || {} : null);
  let body = renderFields(box, list.find((s) => s.id === pick.value), kept(pick.value));
  pick.addEventListener('change', () => {
    body = renderFields(box, list.find((s) => s.id === pick.value), kept(pick.value));
  });
  const err = h('div.alert.error', { role: 'alert', hidden: true });
  const m = modal(ch ? ch.name : t('notify.new'));
  const form = h('form.form', { novalidate: true }, err,
    field('c-name', t('tasks.col.name'), nameI, null, 'name'),
    field('c-service', t('svc.label'), pick, null, 'service'), box,
    h('div.actions', h('button.btn.primary', { type: 'submit' }, t('common.save')),
      btn(t('common.cancel'), () => m.close(), 'ghost')));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    unmark(form, err);
    try {
      const payload = { name: nameI.value.trim(), ...body() };
      if (ch) await api('PATCH', apiPath('notifications', 'channels', ch.id), payload);
      else await api('POST', apiPath('notifications', 'channels'), payload);
      m.close();
      reload();
    } catch (ex) { markField(form, err, ex.field, ex.message).focus(); }
  });
  m.open(form);
  nameI.focus();
}

export { channelForm, services, svcName };
