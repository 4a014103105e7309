/* qledge panel: the shared core (layout and security: docs/panel.md). Server data goes in
 * as text, never as HTML. Signed in by an HttpOnly session cookie (docs/panel.md "Signing
 * in"): the page never holds a credential; the admin token is sent once, to sign in. */
import { STRINGS } from './i18n.js';
import { errorText } from './errtext.js';
import { zoneTag } from './zones.js';

const K_LANG = 'qledge.lang';
const pages = {}; // filled by main.js

// ---- storage
function sget(storage, key) {
  try { return window[storage].getItem(key) || ''; } catch (e) { return ''; }
}
function sset(storage, key, value) {
  try {
    if (value) window[storage].setItem(key, value); else window[storage].removeItem(key);
  } catch (e) { /* storage disabled: keep it in memory only */ }
}
let signedIn = false; let offer = false; // offer: the header link says "Set a password"
let lang = sget('localStorage', K_LANG);
if (!STRINGS[lang]) lang = /^zh/i.test(navigator.language || '') ? 'zh' : 'en';

// ---- i18n
function t(key, vars) {
  let s = (STRINGS[lang] && STRINGS[lang][key]) ?? STRINGS.en[key] ?? key;
  if (vars) s = s.replace(/\{(\w+)\}/g, (m, k) => (vars[k] ?? m));
  return s;
}
// The words for a code (the string `prefix + code`), else the code itself.
function words(prefix, code) {
  const key = prefix + code;
  const text = t(key);
  return text === key ? String(code) : text;
}
const locale = () => (lang === 'zh' ? 'zh-CN' : 'en-GB');
const statusLabel = (s) => t('status.' + s);

// ---- formatting
function fmtTime(ms, timeZone) {
  if (ms == null) return '—';
  const opts = { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit',
    minute: '2-digit', second: '2-digit', hourCycle: 'h23' };
  if (timeZone) opts.timeZone = timeZone;
  try { // the one rule (zones.js): every time shown says its zone
    return new Intl.DateTimeFormat(locale(), opts).format(new Date(ms)) + ' ' + zoneTag(ms, timeZone);
  } catch (e) {
    delete opts.timeZone;
    return new Intl.DateTimeFormat(locale(), opts).format(new Date(ms)) + ' ' + zoneTag(ms);
  }
}
function fmtRelative(ms) {
  const diff = ms - Date.now();
  const abs = Math.abs(diff);
  const rtf = new Intl.RelativeTimeFormat(locale(), { numeric: 'auto' });
  if (abs < 60e3) return rtf.format(Math.round(diff / 1e3), 'second');
  if (abs < 3600e3) return rtf.format(Math.round(diff / 60e3), 'minute');
  if (abs < 86400e3) return rtf.format(Math.round(diff / 3600e3), 'hour');
  return rtf.format(Math.round(diff / 86400e3), 'day');
}
function fmtDur(ms) {
  if (ms == null || ms < 0) return '—';
  if (ms < 1000) return t('dur.ms', { n: Math.round(ms) });
  if (ms < 60e3) return t('dur.s', { n: ms % 1000 === 0 ? ms / 1000 : (ms / 1000).toFixed(ms < 10e3 ? 2 : 1) });
  const s = Math.round(ms / 1000);
  if (s < 3600) return t('dur.min', { m: Math.floor(s / 60), s: s % 60 });
  if (s < 86400) return t('dur.h', { h: Math.floor(s / 3600), m: Math.floor((s % 3600) / 60) });
  return t('dur.d', { d: Math.floor(s / 86400), h: Math.floor((s % 86400) / 3600) });
}
function fmtBytes(n) {
  if (n == null || Number.isNaN(Number(n))) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = Number(n); let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return (i === 0 ? String(v) : v.toFixed(v < 10 ? 1 : 0)) + ' ' + units[i];
}
const shortId = (id) => (id ? id.slice(-8) : '');
// A task's or run's placement (docs/fleet.md) in words; null: any node.
const placeText = (p) => (p && (p.node || p.labels.length) ? t('place', {
  node: p.node || t('place.any'), labels: p.labels.join(' ') || '—' }) : null);

// ---- DOM
const PROPS = new Set(['value', 'checked', 'selected', 'disabled', 'hidden', 'htmlFor',
  'tabIndex']);
// h('p.muted.small', props, ...kids): classes may come with the tag name; props may be left out.
function h(tag, props, ...kids) {
  if (props?.constructor !== Object) { kids.unshift(props); props = null; }
  const [name, ...cls] = tag.split('.');
  const el = document.createElement(name);
  if (cls.length) el.className = cls.join(' ');
  for (const [k, v] of Object.entries(props || {})) {
    if (v == null || v === false) continue;
    if (k === 'class') el.className = (el.className + ' ' + v).trim();
    else if (k === 'text') el.textContent = v;
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (PROPS.has(k)) el[k] = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, kids);
  return el;
}
function append(el, kids) {
  for (const kid of kids.flat(Infinity)) {
    if (kid == null || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}
const clear = (el) => { while (el.firstChild) el.removeChild(el.firstChild); return el; };
// Not Element.append: it would show a null kid as the text "null".
const fill = (el, ...kids) => append(clear(el), kids);
let uid = 0;
const nextId = (p) => `${p}-${++uid}`;

function badge(status) {
  return h('span', { class: `badge badge-${status}`, 'data-status': status },
    statusLabel(status));
}
const btn = (label, onclick, cls, extra) =>
  h('button', { type: 'button', class: 'btn ' + (cls || ''), onclick, ...(extra || {}) }, label);
function field(id, label, control, help, err) {
  const helpId = help ? id + '-help' : null;
  const errId = id + '-err';
  if (helpId) control.setAttribute('aria-describedby', helpId);
  return h('div.field', { 'data-field': err || '' },
    h('label', { htmlFor: id }, label),
    control,
    help ? h('p.help', { id: helpId }, help) : null,
    h('p.field-error', { id: errId, hidden: true }));
}
// `message` under field `name` (the first stays), its control (or `ctl`) marked invalid and
// described by it; returns what to focus. A message naming no field goes in `top`.
function markField(form, top, name, message, ctl) {
  const wrap = name && form.querySelector(`[data-field="${name}"]`);
  if (!wrap) { top.textContent = message; top.hidden = false; return top; }
  const err = wrap.querySelector('.field-error');
  if (err.hidden) { err.textContent = message; err.hidden = false; }
  const c = ctl || wrap.querySelector('input, textarea, select, button');
  c.setAttribute('aria-invalid', 'true');
  const ids = (c.getAttribute('aria-describedby') || '').split(' ').filter(Boolean);
  if (!ids.includes(err.id)) c.setAttribute('aria-describedby', [...ids, err.id].join(' '));
  return c;
}
function unmark(form, top) {
  for (const el of form.querySelectorAll('.field-error')) { el.hidden = true; el.textContent = ''; }
  for (const el of form.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
  if (top) top.hidden = true;
}
// A table cell of row buttons. The cell stays a table cell (a flex box in its place
// would end above the row's other cells and break the row line); the wrapper flexes.
function actionsCell(label, ...buttons) {
  return h('td.actions-cell', { 'data-label': label },
    h('div.row-actions', buttons));
}
function dl(pairs) {
  return h('dl.kv', pairs.filter(Boolean).map(([k, v]) => [
    h('dt', k), h('dd', v)]));
}
// A row button whose accessible name says which row: "Delete — nightly".
const rowBtn = (label, name, onclick, cls, extra) =>
  btn(label, onclick, cls, { 'aria-label': `${label} — ${name}`, ...extra });
const loading = () => h('p.muted', t('common.loading'));
const refreshBtn = (load) => btn(t('common.refresh'), () => load(), 'ghost',
  { 'data-action': 'refresh' });
// A data table: `cols` head the columns and label each cell (phones show cells as cards).
function grid(caption, cols, rows, extra) {
  return h('table.grid', extra,
    caption ? h('caption.sr-only', caption) : null,
    h('thead', h('tr', cols.map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', rows));
}
// One row of a grid; a cell that is already a <td> (actionsCell) goes in as it is.
const row = (props, cols, ...cells) => h('tr', props, cells.map((c, i) =>
  (c instanceof HTMLTableCellElement ? c : h('td', { 'data-label': cols[i] }, c))));
const guarded = (fn) => async (...args) => {
  try { await fn(...args); } catch (e) { notify(e.message, 'error'); }
};
const apiPath = (...parts) => '/' + parts.map(encodeURIComponent).join('/');
// The blob URL must outlive the click, or the download fails.
function saveFile(blob, name) {
  const url = URL.createObjectURL(blob);
  const a = h('a', { href: url, download: name, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

// ---- notices and dialogs
let toastTimer = 0;
function notify(message, kind) {
  const el = document.getElementById('toast');
  if (!el) return;
  el.className = 'toast ' + (kind || 'info');
  el.textContent = message;
  el.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { el.hidden = true; el.textContent = ''; }, 6000);
}

// A modal dialog titled `title`; `close()` removes it and gives focus back.
function modal(title, ...content) {
  const back = document.activeElement;
  const titleId = nextId('dlg');
  const dialog = h('dialog.dialog', { 'aria-labelledby': titleId },
    h('h2', { id: titleId }, title));
  const close = () => {
    if (dialog.open) dialog.close();
    dialog.remove();
    if (back && back.isConnected) back.focus();
  };
  const open = (...rest) => {
    append(dialog, [...content, ...rest]);
    document.body.append(dialog);
    dialog.showModal();
  };
  return { dialog, close, open };
}

function confirmDialog(title, message, okLabel, danger) {
  return new Promise((resolve) => {
    const m = modal(title, h('p', message));
    const done = (ok) => { m.close(); resolve(ok); };
    const cancel = btn(t('common.cancel'), () => done(false), 'ghost', { 'data-action': 'cancel' });
    const ok = btn(okLabel, () => done(true), danger ? 'danger' : 'primary',
      { 'data-action': 'confirm' });
    m.dialog.addEventListener('cancel', (e) => { e.preventDefault(); done(false); });
    m.open(h('div.actions', cancel, ok));
    cancel.focus();
  });
}

// ---- API (a refusal's `error`/`rule` + `params` (docs/api.md): said by errtext.js)
class ApiError extends Error {
  constructor(status, body, fallback) {
    const b = body || {};
    super(errorText(b, b.message || fallback || `HTTP ${status}`, lang));
    Object.assign(this, { status, code: b.error || '', field: b.field || null, body: b });
  }
}
async function api(method, path, body, opts) {
  const headers = {};
  if (opts && opts.bearer) headers.Authorization = 'Bearer ' + opts.bearer; // TOTP off
  const form = body instanceof FormData; // an upload: the browser sets its boundary
  if (body !== undefined && !form) headers['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch('/api/v1' + path, {
      method, headers, cache: 'no-store', credentials: 'same-origin',
      body: body === undefined || form ? body : JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiError(0, null, t('err.network'));
  }
  if (res.status === 401 && !(opts && opts.signin)) {
    signedOut(t('err.session'));
    throw new ApiError(401, null, t('err.session'));
  }
  if (!res.ok) {
    let data = null;
    try { data = await res.json(); } catch (e) { /* not JSON */ }
    throw new ApiError(res.status, data, res.statusText);
  }
  if (res.status === 204) return null;
  if (opts && opts.raw) return res;
  return res.json();
}
const q = (params) => {
  const s = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v != null && v !== '') s.set(k, v);
  const str = s.toString();
  return str ? '?' + str : '';
};

// ---- routing and the shell
// The pages that take only (main, alive), in the order of the navigation after Runs.
const LISTS = ['envs', 'deps', 'subs', 'notifications', 'system'];
let cleanups = [];
let generation = 0;
let firstRender = true;
const onLeave = (fn) => cleanups.push(fn);

function parseHash() {
  const raw = location.hash.replace(/^#/, '');
  const [path, qs] = raw.split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  return { parts: parts.length ? parts : ['overview'], query: new URLSearchParams(qs || '') };
}

function signIn(noPassword) { signedIn = true; offer = Boolean(noPassword); }
function signedOut(message) { // the session ended (elsewhere, expired): the sign-in page;
  signedIn = false; render(); // the address stays, so signing in lands on the same page
  if (message) notify(message, 'error');
}

const signOut = () => api('POST', '/auth/logout', undefined, { signin: true })
  .catch(() => null).then(() => signedOut());

function setLang(next) {
  lang = next;
  sset('localStorage', K_LANG, next);
  render();
}

function shell(section) {
  document.documentElement.lang = lang === 'zh' ? 'zh-CN' : 'en';
  const app = clear(document.getElementById('app'));
  const other = lang === 'zh' ? 'en' : 'zh';
  const links = ['overview', 'tasks', 'scripts', 'runs', ...LISTS].map((id) => [id, 'nav.' + id]);
  const main = h('main', { id: 'main', tabIndex: -1 });
  const menu = signedIn ? btn(t('nav.menu'), () => { // phones: the links fold behind it
    const open = menu.getAttribute('aria-expanded') !== 'true';
    menu.setAttribute('aria-expanded', String(open)); menu.parentNode.classList.toggle('nav-open', open);
  }, 'ghost small nav-toggle', { 'aria-expanded': 'false', 'aria-controls': 'nav-links', 'data-action': 'menu' }) : null;
  append(app, [
    h('a.skip', { href: '#main', onclick: (e) => { e.preventDefault(); main.focus(); } },
      t('nav.skip')),
    h('header.top', h('a.brand', { href: '#/overview' }, 'qledge'), menu,
      signedIn ? h('nav', { id: 'nav-links', 'aria-label': t('nav.label') }, links.map(([id, key]) =>
        h('a', { href: '#/' + id, 'aria-current': section === id ? 'page' : null }, t(key))))
        : h('span.spacer'),
      h('div.tools', btn(t('lang.other'), () => setLang(other), 'ghost small lang',
          { lang: other === 'zh' ? 'zh-CN' : 'en', 'aria-label': t('lang.switch'),
            'data-action': 'lang' }),
        signedIn ? h('a.btn.ghost.small', { href: '#/account', 'data-action': 'account',
          'aria-current': section === 'account' ? 'page' : null }, t(offer ? 'nav.setPassword' : 'nav.account')) : null,
        signedIn ? btn(t('nav.signout'), () => signOut(), 'ghost small',
          { 'data-action': 'signout' }) : null)),
    main,
    h('div.toast', { id: 'toast', role: 'status', 'aria-live': 'polite', hidden: true }),
  ]);
  return main;
}

function heading(main, text, ...rest) {
  const h1 = h('h1', { tabIndex: -1 }, text);
  main.append(h('div.page-head', h1, h('div.actions', rest)));
  if (!firstRender) h1.focus({ preventScroll: false });
  document.title = `${text} · qledge`;
  return h1;
}

function render() {
  for (const fn of cleanups.splice(0)) { try { fn(); } catch (e) { /* ignore */ } }
  generation += 1;
  const gen = generation;
  const alive = () => gen === generation;
  const { parts, query } = parseHash();
  if (parts[0] === 'notify') { location.replace('#/notifications'); return; } // the old name
  if (!signedIn || parts[0] === 'login') {
    pages.login(shell('login'));
  } else {
    const main = shell(parts[0]);
    const [section, id] = parts;
    if (section === 'tasks' && id) pages.taskEditor(main, id === 'new' ? null : id, alive, query);
    else if (section === 'scripts') pages.scripts(main, id || '', alive);
    else if (section === 'runs' && id) pages.run(main, id, alive);
    else if (section === 'runs') pages.runs(main, query, alive);
    else if (LISTS.includes(section)) pages[section](main, alive);
    else if (section === 'account') pages.account(main, alive);
    else (section === 'overview' ? pages.overview : pages.tasks)(main, alive, query);
  }
  firstRender = false;
}

const failBox = (box, err) => fill(box, h('div.alert.error', { role: 'alert' }, err.message || String(err)));

// Every task of the user's, page by page (the chain pickers and the runs filter).
async function loadAllTasks() {
  const items = [];
  let after = 0;
  for (let page = 0; page < 20; page += 1) {
    const res = await api('GET', '/tasks' + q({ after, limit: 500, internal: 0 }));
    items.push(...res.items);
    if (res.next_after == null) break;
    after = res.next_after;
  }
  return items;
}

// ---- start: once main.js has registered every page's view
function start() {
  window.addEventListener('hashchange', render);
  window.addEventListener('storage', (e) => {
    if (e.key === K_LANG && e.newValue && STRINGS[e.newValue] && e.newValue !== lang) setLang(e.newValue);
  });
  render();
}

export {
  pages, t, words, locale, statusLabel, fmtTime, fmtRelative, fmtDur, fmtBytes, shortId,
  placeText, h, append, clear, fill, nextId, badge, btn, rowBtn, field, markField, unmark,
  actionsCell, dl, loading, refreshBtn, grid, row, guarded, apiPath, saveFile, notify, modal,
  confirmDialog, ApiError, api, q, loadAllTasks, onLeave, render, heading, failBox, signIn, signOut, start,
};
