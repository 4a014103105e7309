/* qledge operator panel: the shared core. Vanilla JS, no build step, no third-party code.
 *
 * The panel is a few classic deferred scripts sharing one namespace, `window.QLEDGE`
 * (as i18n.js shares `window.QLEDGE_I18N`): this file holds what every page uses —
 * strings, formatting, DOM helpers, the API client, the router and the page shell —
 * and each page script (login.js, tasks.js, editor.js, runs.js, run.js, log.js,
 * envs.js, scripts.js, system.js) adds its view to `QLEDGE.pages`. Deferred scripts run in
 * document order before DOMContentLoaded, which is when the first page is drawn.
 *
 * Security notes (docs/panel.md):
 * - The admin token lives in sessionStorage (this tab only) and goes out only as
 *   `Authorization: Bearer` from fetch(). It never appears in a URL, and the
 *   panel uses no cookies, so there is no ambient credential to forge (no CSRF).
 * - The live log uses EventSource, which cannot send headers: it gets a
 *   single-use, single-run stream ticket that expires after 60 s (log.js).
 * - Everything from the server is inserted as text (textContent), never as HTML;
 *   the page's Content-Security-Policy forbids inline and foreign scripts.
 */
'use strict';
window.QLEDGE = (() => {
  const STRINGS = window.QLEDGE_I18N || { en: {} };
  const K_TOKEN = 'qledge.token';
  const K_LANG = 'qledge.lang';
  const pages = {}; // filled by the page scripts: tasks.js, run.js, …

  // ---- storage ---------------------------------------------------------------------------
  function sget(storage, key) {
    try { return window[storage].getItem(key) || ''; } catch (e) { return ''; }
  }
  function sset(storage, key, value) {
    try {
      if (value) window[storage].setItem(key, value); else window[storage].removeItem(key);
    } catch (e) { /* storage disabled: keep it in memory only */ }
  }
  let token = sget('sessionStorage', K_TOKEN);
  let lang = sget('localStorage', K_LANG);
  if (!STRINGS[lang]) lang = /^zh/i.test(navigator.language || '') ? 'zh' : 'en';

  // ---- i18n ------------------------------------------------------------------------------
  function t(key, vars) {
    let s = (STRINGS[lang] && STRINGS[lang][key]) ?? STRINGS.en[key] ?? key;
    if (vars) s = s.replace(/\{(\w+)\}/g, (m, k) => (vars[k] ?? m));
    return s;
  }
  const locale = () => (lang === 'zh' ? 'zh-CN' : 'en-GB');
  const statusLabel = (s) => t('status.' + s);

  // ---- formatting ------------------------------------------------------------------------
  function fmtTime(ms, timeZone) {
    if (ms == null) return '—';
    const opts = { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit',
      minute: '2-digit', second: '2-digit', hourCycle: 'h23' };
    if (timeZone) opts.timeZone = timeZone;
    try {
      return new Intl.DateTimeFormat(locale(), opts).format(new Date(ms));
    } catch (e) {
      delete opts.timeZone;
      return new Intl.DateTimeFormat(locale(), opts).format(new Date(ms));
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
    if (ms < 60e3) {
      return t('dur.s', { n: ms % 1000 === 0 ? ms / 1000 : (ms / 1000).toFixed(ms < 10e3 ? 2 : 1) });
    }
    const s = Math.round(ms / 1000);
    if (s < 3600) return t('dur.min', { m: Math.floor(s / 60), s: s % 60 });
    if (s < 86400) return t('dur.h', { h: Math.floor(s / 3600), m: Math.floor((s % 3600) / 60) });
    return t('dur.d', { d: Math.floor(s / 86400), h: Math.floor((s % 86400) / 3600) });
  }
  function fmtBytes(n) {
    if (n == null || Number.isNaN(Number(n))) return '—';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let v = Number(n);
    let i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
    return (i === 0 ? String(v) : v.toFixed(v < 10 ? 1 : 0)) + ' ' + units[i];
  }
  const shortId = (id) => (id ? id.slice(-8) : '');

  // ---- DOM -------------------------------------------------------------------------------
  const PROPS = new Set(['value', 'checked', 'selected', 'disabled', 'hidden', 'htmlFor',
    'tabIndex']);
  function h(tag, props, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v == null || v === false) continue;
      if (k === 'class') el.className = v;
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
  // Replace el's children. Use this (or append), never Element.append with a value that
  // may be null: the DOM would show it as the text "null".
  const fill = (el, ...kids) => append(clear(el), kids);
  let uid = 0;
  const nextId = (p) => `${p}-${++uid}`;

  function badge(status) {
    return h('span', { class: `badge badge-${status}`, 'data-status': status },
      statusLabel(status));
  }
  function btn(label, onclick, cls, extra) {
    return h('button', { type: 'button', class: 'btn ' + (cls || ''), onclick, ...(extra || {}) },
      label);
  }
  function field(id, label, control, help, err) {
    const helpId = help ? id + '-help' : null;
    const errId = id + '-err';
    if (helpId) control.setAttribute('aria-describedby', helpId);
    return h('div', { class: 'field', 'data-field': err || '' },
      h('label', { htmlFor: id }, label),
      control,
      help ? h('p', { class: 'help', id: helpId }, help) : null,
      h('p', { class: 'field-error', id: errId, hidden: true }));
  }
  // A table cell of row buttons. The cell stays a table cell (a flex box in its place
  // would end above the row's other cells and break the row line); the wrapper flexes.
  function actionsCell(label, ...buttons) {
    return h('td', { 'data-label': label, class: 'actions-cell' },
      h('div', { class: 'row-actions' }, buttons));
  }
  function dl(pairs) {
    return h('dl', { class: 'kv' }, pairs.filter(Boolean).map(([k, v]) => [
      h('dt', null, k), h('dd', null, v)]));
  }

  // ---- notices and dialogs ----------------------------------------------------------------
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

  function confirmDialog(title, message, okLabel, danger) {
    return new Promise((resolve) => {
      const back = document.activeElement;
      const titleId = nextId('dlg');
      const dialog = h('dialog', { class: 'dialog', 'aria-labelledby': titleId },
        h('h2', { id: titleId }, title),
        h('p', null, message));
      const done = (ok) => {
        if (dialog.open) dialog.close();
        dialog.remove();
        if (back && back.isConnected) back.focus();
        resolve(ok);
      };
      const cancel = btn(t('common.cancel'), () => done(false), 'ghost', { 'data-action': 'cancel' });
      const ok = btn(okLabel, () => done(true), danger ? 'danger' : 'primary',
        { 'data-action': 'confirm' });
      dialog.append(h('div', { class: 'actions' }, cancel, ok));
      dialog.addEventListener('cancel', (e) => { e.preventDefault(); done(false); });
      document.body.append(dialog);
      dialog.showModal();
      cancel.focus();
    });
  }

  // ---- API -------------------------------------------------------------------------------
  class ApiError extends Error {
    constructor(status, body, fallback) {
      super((body && body.message) || fallback || `HTTP ${status}`);
      this.status = status;
      this.code = (body && body.error) || '';
      this.field = (body && body.field) || null;
      this.body = body || {};
    }
  }
  async function api(method, path, body, opts) {
    const headers = { Authorization: 'Bearer ' + (opts && opts.token || token) };
    const form = body instanceof FormData; // an upload: the browser sets its boundary
    if (body !== undefined && !form) headers['Content-Type'] = 'application/json';
    let res;
    try {
      res = await fetch('/api/v1' + path, {
        method, headers, cache: 'no-store', credentials: 'omit',
        body: body === undefined || form ? body : JSON.stringify(body),
      });
    } catch (e) {
      throw new ApiError(0, null, t('err.network'));
    }
    if (res.status === 401 && !(opts && opts.token)) {
      signOut(t('err.session'));
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

  // ---- routing and the shell --------------------------------------------------------------
  let cleanups = [];
  let generation = 0;
  let firstRender = true;
  const onLeave = (fn) => cleanups.push(fn);

  function parseHash() {
    const raw = location.hash.replace(/^#/, '');
    const [path, qs] = raw.split('?');
    const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
    return { parts: parts.length ? parts : ['tasks'], query: new URLSearchParams(qs || '') };
  }

  function signIn(value) {
    token = value;
    sset('sessionStorage', K_TOKEN, value);
  }

  function signOut(message) {
    token = '';
    sset('sessionStorage', K_TOKEN, '');
    render();
    if (message) notify(message, 'error');
  }

  function setLang(next) {
    lang = next;
    sset('localStorage', K_LANG, next);
    render();
  }

  function shell(section) {
    document.documentElement.lang = lang === 'zh' ? 'zh-CN' : 'en';
    const app = clear(document.getElementById('app'));
    const other = lang === 'zh' ? 'en' : 'zh';
    const links = [['tasks', 'nav.tasks'], ['scripts', 'nav.scripts'], ['runs', 'nav.runs'],
      ['envs', 'nav.envs'], ['system', 'nav.system']];
    const main = h('main', { id: 'main', tabIndex: -1 });
    append(app, [
      h('a', { class: 'skip', href: '#main', onclick: (e) => { e.preventDefault(); main.focus(); } },
        t('nav.skip')),
      h('header', { class: 'top' },
        h('a', { class: 'brand', href: '#/tasks' }, 'qledge'),
        token ? h('nav', { 'aria-label': t('nav.label') }, links.map(([id, key]) =>
          h('a', { href: '#/' + id, 'aria-current': section === id ? 'page' : null }, t(key))))
          : h('span', { class: 'spacer' }),
        h('div', { class: 'tools' },
          btn(t('lang.other'), () => setLang(other), 'ghost small lang',
            { lang: other === 'zh' ? 'zh-CN' : 'en', 'aria-label': t('lang.switch'),
              'data-action': 'lang' }),
          token ? btn(t('nav.signout'), () => signOut(), 'ghost small',
            { 'data-action': 'signout' }) : null)),
      main,
      h('div', { id: 'toast', class: 'toast', role: 'status', 'aria-live': 'polite', hidden: true }),
    ]);
    return main;
  }

  function heading(main, text, ...rest) {
    const h1 = h('h1', { tabIndex: -1 }, text);
    main.append(h('div', { class: 'page-head' }, h1, h('div', { class: 'actions' }, rest)));
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
    if (!token) {
      pages.login(shell('login'));
    } else {
      const main = shell(parts[0]);
      const [section, id] = parts;
      if (section === 'tasks' && id) pages.taskEditor(main, id === 'new' ? null : id, alive, query);
      else if (section === 'scripts') pages.scripts(main, id || '', alive);
      else if (section === 'runs' && id) pages.run(main, id, alive);
      else if (section === 'runs') pages.runs(main, query, alive);
      else if (section === 'envs') pages.envs(main, alive);
      else if (section === 'system') pages.system(main, alive);
      else pages.tasks(main, alive);
    }
    firstRender = false;
  }

  function failBox(main, err) {
    main.append(h('div', { class: 'alert error', role: 'alert' }, err.message || String(err)));
  }

  // Every task, page by page (the task list and the runs filter both need them all).
  async function loadAllTasks() {
    const items = [];
    let after = 0;
    for (let page = 0; page < 20; page += 1) {
      const res = await api('GET', '/tasks' + q({ after, limit: 500 }));
      items.push(...res.items);
      if (res.next_after == null) break;
      after = res.next_after;
    }
    return items;
  }

  // ---- start: after every deferred page script has registered its view ----------------------
  function start() {
    window.addEventListener('hashchange', render);
    window.addEventListener('storage', (e) => {
      if (e.key === K_LANG && e.newValue && STRINGS[e.newValue] && e.newValue !== lang) setLang(e.newValue);
    });
    render();
  }
  // Deferred scripts run while readyState is already 'interactive', all of them before
  // DOMContentLoaded: only then is every page registered.
  document.addEventListener('DOMContentLoaded', start);

  return {
    pages, t, locale, statusLabel, fmtTime, fmtRelative, fmtDur, fmtBytes, shortId,
    h, append, clear, fill, nextId, badge, btn, field, actionsCell, dl, notify, confirmDialog,
    ApiError, api, q, loadAllTasks, onLeave, render, heading, failBox, signIn,
  };
})();
