/* qledge panel: a notification channel's form — the service picker (the catalogue from
 * GET /notification-services, notifications/services.py) or a hand-written apprise URL.
 * The server builds the URL from the fields; secrets are typed once and never shown
 * again (an edit shows the plain fields and which secrets are set; secret fields left
 * empty keep theirs: notifications/readback.py). */
import { t, h, btn, field, markField, unmark, api, apiPath, modal } from './core.js';

const OTHER = 'other';
let catalogue = null;
// The catalogue, fetched once a page load (it changes with the code only).
async function services() {
  if (!catalogue) catalogue = (await api('GET', '/notification-services')).items;
  return catalogue;
}
const svcName = (s) => t('svc.n.' + s.id) || s.label;

// Kept on an edit when left empty: secrets, and server URLs (a path may be one).
const hidden = (f) => f.kind === 'secret' || f.kind === 'url';

function control(f, id, kept, shown) {
  const value = (shown && shown[f.name]) || '';
  if (f.kind === 'choice') {
    const sel = h('select', { id }, f.choices.map((c) => h('option', { value: c }, t('svc.c.' + c))));
    if (value) sel.value = value;
    return sel;
  }
  const secret = f.kind === 'secret';
  return h('input', { id, type: secret ? 'password' : 'text', autocomplete: secret ? 'new-password' : 'off',
    spellcheck: 'false', class: f.kind === 'text' ? null : 'mono', value,
    inputmode: f.kind === 'number' ? 'numeric' : f.kind === 'url' ? 'url' : null,
    placeholder: kept && hidden(f) ? t(kept[f.name] ? 'svc.set' : 'svc.unset') : '' });
}

// The fields of `svc` (null: the raw URL) into `box`; returns () => the body's part.
// `kept`/`shown`: an edit of a channel of this service (its secrets set, plain fields).
function renderFields(box, svc, kept, shown) {
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
    const el = control(f, id, kept, shown);
    const help = [f.help && t(f.help), !f.required && !f.help && t('svc.optional')]
      .filter(Boolean).join(' ');
    box.append(field(id, t('svc.f.' + f.name), el, help || null, 'fields.' + f.name));
    return [f, el, el.value];
  });
  if (kept) box.append(h('p.help', t('svc.keep')));
  return () => {
    // An edit sends the plain fields as they stand ('' clears one) and the secrets typed;
    // nothing at all when nothing changed (the URL stays exactly as it is).
    const fields = Object.fromEntries(ins.filter(([f, el]) => el.value.trim() !== '' ||
      (kept && !hidden(f))).map(([f, el]) => [f.name, el.value.trim()]));
    const changed = ins.some(([, el, was]) => el.value.trim() !== was.trim());
    return kept && !changed ? {} : { service: svc.id, fields };
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
  const same = (id) => ch && (ch.picker || OTHER) === id;
  const render = (id) => renderFields(box, list.find((s) => s.id === id),
    same(id) ? ch.secrets || {} : null, same(id) ? ch.fields || {} : null);
  let body = render(pick.value);
  pick.addEventListener('change', () => { body = render(pick.value); });
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
