/* qledge operator panel — vanilla JS, no build step, no third-party code.
 *
 * Security notes (docs/panel.md):
 * - The admin token lives in sessionStorage (this tab only) and goes out only as
 *   `Authorization: Bearer` from fetch(). It never appears in a URL, and the
 *   panel uses no cookies, so there is no ambient credential to forge (no CSRF).
 * - The live log uses EventSource, which cannot send headers: it gets a
 *   single-use, single-run stream ticket that expires after 60 s.
 * - Everything from the server is inserted as text (textContent), never as HTML;
 *   the page's Content-Security-Policy forbids inline and foreign scripts.
 */
'use strict';
(() => {
  const STRINGS = window.QLEDGE_I18N || { en: {} };
  const K_TOKEN = 'qledge.token';
  const K_LANG = 'qledge.lang';
  const STATUSES = ['queued', 'running', 'succeeded', 'failed', 'cancelled', 'timed_out', 'lost',
    'blocked'];
  const LOG_KEEP = 2000000; // characters of log kept on the page (the download has it all)

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
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    let res;
    try {
      res = await fetch('/api/v1' + path, {
        method, headers, cache: 'no-store', credentials: 'omit',
        body: body === undefined ? undefined : JSON.stringify(body),
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
    const links = [['tasks', 'nav.tasks'], ['runs', 'nav.runs'], ['envs', 'nav.envs'],
      ['system', 'nav.system']];
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
      viewLogin(shell('login'));
    } else {
      const main = shell(parts[0]);
      const [section, id] = parts;
      if (section === 'tasks' && id) viewTaskEditor(main, id === 'new' ? null : id, alive);
      else if (section === 'runs' && id) viewRun(main, id, alive);
      else if (section === 'runs') viewRuns(main, query, alive);
      else if (section === 'envs') viewEnvs(main, alive);
      else if (section === 'system') viewSystem(main, alive);
      else viewTasks(main, alive);
    }
    firstRender = false;
  }

  function failBox(main, err) {
    main.append(h('div', { class: 'alert error', role: 'alert' }, err.message || String(err)));
  }

  // ---- sign in -------------------------------------------------------------------------------
  function viewLogin(main) {
    document.title = `${t('login.title')} · qledge`;
    const input = h('input', { id: 'login-token', type: 'password', autocomplete: 'off',
      spellcheck: 'false', required: true, 'aria-describedby': 'login-token-help' });
    const err = h('p', { class: 'field-error', id: 'login-token-err', role: 'alert', hidden: true });
    const submit = h('button', { type: 'submit', class: 'btn primary' }, t('login.submit'));
    // No `name` on the input and no GET: the token can never be serialised into a URL.
    const form = h('form', { class: 'card login', method: 'post', novalidate: true },
      h('h1', { tabIndex: -1 }, t('login.title')),
      h('p', null, t('login.intro')),
      h('div', { class: 'field' },
        h('label', { htmlFor: 'login-token' }, t('login.token')), input,
        h('p', { class: 'help', id: 'login-token-help' }, t('login.help')), err),
      h('div', { class: 'actions' }, submit));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const value = input.value.trim();
      err.hidden = true;
      input.removeAttribute('aria-invalid');
      if (!value) {
        err.textContent = t('login.empty'); err.hidden = false;
        input.setAttribute('aria-invalid', 'true'); input.focus();
        return;
      }
      submit.disabled = true;
      try {
        await api('GET', '/system', undefined, { token: value });
        token = value;
        sset('sessionStorage', K_TOKEN, value);
        input.value = '';
        if (!location.hash.startsWith('#/') || location.hash === '#/login') {
          location.hash = '#/tasks'; // hashchange renders
        } else {
          render();
        }
      } catch (ex) {
        err.textContent = ex.status === 401 ? t('login.refused') : ex.message;
        err.hidden = false;
        input.setAttribute('aria-invalid', 'true');
        input.focus();
      } finally {
        submit.disabled = false;
      }
    });
    main.append(form);
    input.focus();
  }

  // ---- tasks ---------------------------------------------------------------------------------
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

  async function runNow(task) {
    try {
      const res = await api('POST', `/tasks/${encodeURIComponent(task.id)}/runs`);
      notify(t('tasks.started', { name: task.name }), 'ok');
      location.hash = '#/runs/' + res.run.id;
    } catch (e) {
      if (e.status === 409 && e.body.active_run_id) {
        notify(t('tasks.busy', { name: task.name }), 'error');
        location.hash = '#/runs/' + e.body.active_run_id;
      } else {
        notify(e.message, 'error');
      }
    }
  }

  function viewTasks(main, alive) {
    heading(main, t('tasks.title'),
      h('a', { class: 'btn primary', href: '#/tasks/new' }, t('tasks.new')),
      btn(t('common.refresh'), () => load(), 'ghost', { 'data-action': 'refresh' }));
    const body = h('div', { class: 'card', 'aria-busy': 'true' }, h('p', { class: 'muted' },
      t('common.loading')));
    main.append(body);

    let loadSeq = 0; // only the latest load may paint
    async function load() {
      const mine = ++loadSeq;
      const current = () => alive() && mine === loadSeq;
      body.setAttribute('aria-busy', 'true');
      let tasks;
      let lasts;
      try {
        tasks = await loadAllTasks();
        lasts = await Promise.all(tasks.map((task) =>
          api('GET', '/runs' + q({ task_id: task.id, limit: 1 }))
            .then((r) => r.items[0] || null, () => null)));
      } catch (e) {
        if (!current()) return;
        clear(body).removeAttribute('aria-busy');
        failBox(body, e);
        return;
      }
      if (!current()) return;
      clear(body).removeAttribute('aria-busy');
      if (!tasks.length) {
        body.append(h('p', { class: 'empty' }, t('tasks.empty'), ' ',
          h('a', { href: '#/tasks/new' }, t('tasks.emptyLink'))));
        return;
      }
      const cols = [t('tasks.col.name'), t('tasks.col.schedule'), t('tasks.col.last'),
        t('tasks.col.enabled'), t('tasks.col.actions')];
      const rows = tasks.map((task, i) => {
        const last = lasts[i];
        const sched = task.schedule
          ? [h('code', null, task.schedule), h('div', { class: 'muted small' },
            task.next_fire_at_ms ? t('tasks.next', { when: fmtTime(task.next_fire_at_ms),
              rel: fmtRelative(task.next_fire_at_ms) }) : t('tasks.paused'))]
          : h('span', { class: 'muted' }, t('tasks.manual'));
        const lastCell = last
          ? h('a', { href: '#/runs/' + last.id, class: 'plain' }, badge(last.status),
            last.exit_code != null ? h('span', { class: 'exit' }, t('runs.exit', { code: last.exit_code })) : null,
            h('div', { class: 'muted small' }, fmtTime(last.created_at_ms)))
          : h('span', { class: 'muted' }, t('tasks.never'));
        const toggle = btn(task.enabled ? t('tasks.disable') : t('tasks.enable'), async () => {
          try {
            await api('PUT', `/tasks/${encodeURIComponent(task.id)}`, { enabled: !task.enabled });
            notify(t(task.enabled ? 'tasks.disabled' : 'tasks.enabled', { name: task.name }), 'ok');
            await load();
          } catch (e) { notify(e.message, 'error'); }
        }, 'small', { 'data-action': 'toggle',
          'aria-label': `${task.enabled ? t('tasks.disable') : t('tasks.enable')} — ${task.name}` });
        const del = btn(t('common.delete'), async () => {
          const ok = await confirmDialog(t('tasks.deleteTitle'),
            t('tasks.deleteBody', { name: task.name }), t('common.delete'), true);
          if (!ok) return;
          try {
            await api('DELETE', `/tasks/${encodeURIComponent(task.id)}`);
            notify(t('tasks.deleted', { name: task.name }), 'ok');
            await load();
          } catch (e) { notify(e.message, 'error'); }
        }, 'small danger-ghost', { 'data-action': 'delete',
          'aria-label': `${t('common.delete')} — ${task.name}` });
        return h('tr', { 'data-task-id': task.id, 'data-task-name': task.name },
          h('td', { 'data-label': cols[0] }, h('a', { href: '#/tasks/' + task.id, class: 'strong' },
            task.name), task.labels.length ? h('div', { class: 'labels' },
            task.labels.map((l) => h('span', { class: 'label' }, l))) : null),
          h('td', { 'data-label': cols[1] }, sched),
          h('td', { 'data-label': cols[2] }, lastCell),
          h('td', { 'data-label': cols[3] }, h('span', { class: task.enabled ? 'on' : 'off' },
            task.enabled ? t('common.yes') : t('common.no'))),
          h('td', { 'data-label': cols[4], class: 'row-actions' },
            btn(t('tasks.run'), () => runNow(task), 'small primary',
              { 'data-action': 'run', 'aria-label': `${t('tasks.run')} — ${task.name}` }),
            toggle,
            h('a', { class: 'btn small', href: '#/tasks/' + task.id, 'data-action': 'edit',
              'aria-label': `${t('common.edit')} — ${task.name}` }, t('common.edit')),
            h('a', { class: 'btn small', href: '#/runs?task_id=' + task.id,
              'aria-label': `${t('tasks.runs')} — ${task.name}` }, t('tasks.runs')),
            del));
      });
      body.append(h('table', { class: 'grid' },
        h('caption', { class: 'sr-only' }, t('tasks.title')),
        h('thead', null, h('tr', null, cols.map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', null, rows)));
    }
    load();
  }

  // ---- task editor ---------------------------------------------------------------------------
  function viewTaskEditor(main, taskId, alive) {
    heading(main, taskId ? t('editor.editTitle') : t('editor.newTitle'));
    const box = h('div', null, h('p', { class: 'muted' }, t('common.loading')));
    main.append(box);
    const get = taskId ? api('GET', `/tasks/${encodeURIComponent(taskId)}`) : Promise.resolve(null);
    get.then((task) => { if (alive()) { clear(box); buildTaskForm(box, task, alive); } },
      (e) => { if (alive()) { clear(box); failBox(box, e); } });
  }

  function buildTaskForm(box, task, alive) {
    const v = task || { name: '', command: '', schedule: null, timeout_s: null, env: {},
      enabled: true, concurrency: 'forbid', labels: [] };
    const name = h('input', { id: 'f-name', type: 'text', value: v.name, required: true,
      maxlength: 200, autocomplete: 'off' });
    const command = h('textarea', { id: 'f-command', rows: 4, required: true, spellcheck: 'false',
      class: 'mono' });
    command.value = v.command;
    const schedule = h('input', { id: 'f-schedule', type: 'text', value: v.schedule || '',
      class: 'mono', autocomplete: 'off', spellcheck: 'false', placeholder: '*/5 * * * *' });
    const preview = h('div', { class: 'preview', id: 'f-schedule-preview', 'aria-live': 'polite' });
    const timeout = h('input', { id: 'f-timeout', type: 'number', min: 1, step: 1,
      inputmode: 'numeric', value: v.timeout_s == null ? '' : String(v.timeout_s) });
    const concurrency = h('select', { id: 'f-concurrency' },
      h('option', { value: 'forbid', selected: v.concurrency === 'forbid' }, t('editor.forbid')),
      h('option', { value: 'allow', selected: v.concurrency === 'allow' }, t('editor.allow')));
    const enabled = h('input', { id: 'f-enabled', type: 'checkbox', checked: v.enabled });
    const labels = h('input', { id: 'f-labels', type: 'text', value: v.labels.join(', '),
      autocomplete: 'off' });
    const formErr = h('div', { class: 'alert error', role: 'alert', hidden: true });

    // env rows
    const envRows = h('div', { class: 'env-rows' });
    let envN = 0;
    function addEnvRow(key, value, focus) {
      envN += 1;
      const kId = `f-env-k-${envN}`;
      const vId = `f-env-v-${envN}`;
      const k = h('input', { id: kId, type: 'text', value: key || '', class: 'mono env-key',
        autocomplete: 'off', spellcheck: 'false', placeholder: 'NAME' });
      const val = h('input', { id: vId, type: 'text', value: value || '', class: 'mono env-value',
        autocomplete: 'off', spellcheck: 'false' });
      const row = h('div', { class: 'env-row' },
        h('label', { htmlFor: kId, class: 'sr-only' }, t('editor.envName', { n: envN })), k,
        h('span', { class: 'eq', 'aria-hidden': 'true' }, '='),
        h('label', { htmlFor: vId, class: 'sr-only' }, t('editor.envValue', { n: envN })), val,
        btn(t('common.remove'), () => { row.remove(); addBtn.focus(); }, 'small ghost',
          { 'aria-label': t('editor.envRemove', { n: envN }) }));
      envRows.append(row);
      if (focus) k.focus();
    }
    const addBtn = btn(t('editor.envAdd'), () => addEnvRow('', '', true), 'small',
      { id: 'f-env-add' });
    for (const [k, val] of Object.entries(v.env || {})) addEnvRow(k, val, false);
    const envSet = h('fieldset', { class: 'field', 'data-field': 'env', id: 'f-env' },
      h('legend', null, t('editor.env')),
      h('p', { class: 'help', id: 'f-env-help' }, t('editor.envHelp')),
      envRows, addBtn,
      h('p', { class: 'field-error', id: 'f-env-err', hidden: true }));

    const submit = h('button', { type: 'submit', class: 'btn primary' },
      task ? t('common.save') : t('editor.create'));
    const form = h('form', { class: 'card form', novalidate: true },
      formErr,
      field('f-name', t('editor.name'), name, null, 'name'),
      field('f-command', t('editor.command'), command, t('editor.commandHelp'), 'command'),
      field('f-schedule', t('editor.schedule'), schedule, t('editor.scheduleHelp'), 'schedule'),
      preview,
      h('div', { class: 'row2' },
        field('f-timeout', t('editor.timeout'), timeout, t('editor.timeoutHelp'), 'timeout_s'),
        field('f-concurrency', t('editor.concurrency'), concurrency, t('editor.concurrencyHelp'),
          'concurrency')),
      envSet,
      field('f-labels', t('editor.labels'), labels, t('editor.labelsHelp'), 'labels'),
      h('div', { class: 'field check', 'data-field': 'enabled' }, enabled,
        h('label', { htmlFor: 'f-enabled' }, t('editor.enabled')),
        h('p', { class: 'field-error', id: 'f-enabled-err', hidden: true })),
      h('div', { class: 'actions' }, submit,
        h('a', { class: 'btn ghost', href: '#/tasks' }, t('common.cancel'))));
    box.append(form);

    // schedule preview, debounced; stale answers are dropped
    let seq = 0;
    let timer = 0;
    function previewNow() {
      const expr = schedule.value.trim();
      const mine = ++seq;
      if (!expr) {
        clear(preview).append(h('p', { class: 'muted' }, t('editor.noSchedule')));
        return;
      }
      clear(preview).append(h('p', { class: 'muted' }, t('editor.previewing')));
      api('GET', '/cron/preview' + q({ schedule: expr, n: 5 })).then((res) => {
        if (mine !== seq || !alive()) return;
        clear(preview).append(
          h('p', { class: 'small muted' }, t('editor.previewTz', { tz: res.timezone })),
          h('ol', { class: 'fire-times' }, res.next.map((n) =>
            h('li', null, h('time', { datetime: n.at }, fmtTime(n.at_ms, res.timezone)),
              h('span', { class: 'muted small' }, ' · ' + fmtRelative(n.at_ms))))));
      }, (e) => {
        if (mine !== seq || !alive()) return;
        clear(preview).append(h('p', { class: 'preview-error' }, e.message));
      });
    }
    schedule.addEventListener('input', () => { clearTimeout(timer); timer = setTimeout(previewNow, 300); });
    onLeave(() => clearTimeout(timer));
    previewNow();

    function clearErrors() {
      formErr.hidden = true;
      for (const el of form.querySelectorAll('.field-error')) { el.hidden = true; el.textContent = ''; }
      for (const el of form.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
    }
    function showError(fieldName, message) {
      const wrap = fieldName && form.querySelector(`[data-field="${fieldName}"]`);
      if (!wrap) {
        formErr.textContent = message; formErr.hidden = false; formErr.focus && formErr.focus();
        return;
      }
      const errEl = wrap.querySelector('.field-error');
      errEl.textContent = message; errEl.hidden = false;
      const ctl = wrap.querySelector('input, textarea, select') || addBtn;
      ctl.setAttribute('aria-invalid', 'true');
      const described = (ctl.getAttribute('aria-describedby') || '').split(' ').filter(Boolean);
      if (!described.includes(errEl.id)) described.push(errEl.id);
      ctl.setAttribute('aria-describedby', described.join(' '));
      ctl.focus();
    }

    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      clearErrors();
      const env = {};
      for (const row of envRows.querySelectorAll('.env-row')) {
        const key = row.querySelector('.env-key').value.trim();
        const val = row.querySelector('.env-value').value;
        if (!key && !val) continue;
        if (!key) { showError('env', t('editor.envNoName')); return; }
        if (Object.prototype.hasOwnProperty.call(env, key)) {
          showError('env', t('editor.envDup', { name: key })); return;
        }
        env[key] = val;
      }
      const tv = timeout.value.trim();
      if (tv && !/^\d+$/.test(tv)) { showError('timeout_s', t('editor.timeoutBad')); return; }
      const body = {
        name: name.value, command: command.value,
        schedule: schedule.value.trim() || null,
        timeout_s: tv ? Number(tv) : null,
        env, enabled: enabled.checked, concurrency: concurrency.value,
        labels: labels.value.split(',').map((s) => s.trim()).filter(Boolean),
      };
      submit.disabled = true;
      try {
        if (task) await api('PUT', `/tasks/${encodeURIComponent(task.id)}`, body);
        else await api('POST', '/tasks', body);
        notify(t(task ? 'editor.saved' : 'editor.created', { name: body.name.trim() }), 'ok');
        location.hash = '#/tasks';
      } catch (ex) {
        showError(ex.field, ex.message);
      } finally {
        submit.disabled = false;
      }
    });
  }

  // ---- runs list ----------------------------------------------------------------------------
  function viewRuns(main, query, alive) {
    const state = { task_id: query.get('task_id') || '', status: query.get('status') || '',
      cursors: [] };
    heading(main, t('runs.title'),
      btn(t('common.refresh'), () => load(), 'ghost', { 'data-action': 'refresh' }));
    const taskSel = h('select', { id: 'runs-task' }, h('option', { value: '' }, t('runs.allTasks')));
    const statusSel = h('select', { id: 'runs-status' },
      h('option', { value: '' }, t('runs.allStatuses')),
      STATUSES.map((s) => h('option', { value: s, selected: s === state.status }, statusLabel(s))));
    const filters = h('form', { class: 'filters card', role: 'search' },
      h('div', { class: 'field' }, h('label', { htmlFor: 'runs-task' }, t('runs.task')), taskSel),
      h('div', { class: 'field' }, h('label', { htmlFor: 'runs-status' }, t('runs.status')),
        statusSel),
      h('div', { class: 'field' }, h('button', { type: 'submit', class: 'btn' }, t('runs.apply'))));
    const results = h('div', { class: 'card' });
    const pager = h('div', { class: 'pager' });
    main.append(filters, results, pager);
    let names = {};

    filters.addEventListener('submit', (e) => { e.preventDefault(); apply(); });
    taskSel.addEventListener('change', apply);
    statusSel.addEventListener('change', apply);
    function apply() {
      state.task_id = taskSel.value;
      state.status = statusSel.value;
      state.cursors = [];
      history.replaceState(null, '', '#/runs' + q({ task_id: state.task_id, status: state.status }));
      load();
    }

    loadAllTasks().then((tasks) => {
      if (!alive()) return;
      for (const task of tasks) {
        names[task.id] = task.name;
        taskSel.append(h('option', { value: task.id, selected: task.id === state.task_id }, task.name));
      }
      load();
    }, (e) => { if (alive()) failBox(results, e); });

    let loadSeq = 0; // only the latest request may paint (filters can change quickly)
    async function load() {
      const mine = ++loadSeq;
      const current = () => alive() && mine === loadSeq;
      const cursor = state.cursors[state.cursors.length - 1] || '';
      results.setAttribute('aria-busy', 'true');
      let page;
      try {
        page = await api('GET', '/runs' + q({ task_id: state.task_id, status: state.status,
          cursor, limit: 20 }));
      } catch (e) {
        if (!current()) return;
        clear(results).removeAttribute('aria-busy');
        failBox(results, e);
        return;
      }
      if (!current()) return;
      clear(results).removeAttribute('aria-busy');
      clear(pager);
      if (!page.items.length) {
        results.append(h('p', { class: 'empty' }, t('runs.empty')));
      } else {
        const cols = [t('runs.col.run'), t('runs.col.task'), t('runs.col.status'),
          t('runs.col.exit'), t('runs.col.trigger'), t('runs.col.created'), t('runs.col.duration')];
        results.append(h('table', { class: 'grid' },
          h('caption', { class: 'sr-only' }, t('runs.title')),
          h('thead', null, h('tr', null, cols.map((c) => h('th', { scope: 'col' }, c)))),
          h('tbody', null, page.items.map((r) => h('tr', { 'data-run-id': r.id },
            h('td', { 'data-label': cols[0] }, h('a', { href: '#/runs/' + r.id, class: 'mono' },
              '…' + shortId(r.id))),
            h('td', { 'data-label': cols[1] }, names[r.task_id] || shortId(r.task_id)),
            h('td', { 'data-label': cols[2] }, badge(r.status)),
            h('td', { 'data-label': cols[3] }, r.exit_code == null ? '—' : String(r.exit_code)),
            h('td', { 'data-label': cols[4] }, t('trigger.' + r.trigger)),
            h('td', { 'data-label': cols[5] }, fmtTime(r.created_at_ms)),
            h('td', { 'data-label': cols[6] }, r.started_at_ms
              ? fmtDur((r.finished_at_ms || Date.now()) - r.started_at_ms) : '—'))))));
      }
      if (state.cursors.length) {
        pager.append(btn(t('runs.first'), () => { state.cursors = []; load(); }, 'ghost',
          { 'data-action': 'first' }));
      }
      pager.append(h('span', { class: 'muted' }, t('runs.page', { n: state.cursors.length + 1 })));
      if (page.next_cursor) {
        pager.append(btn(t('runs.next'), () => { state.cursors.push(page.next_cursor); load(); },
          '', { 'data-action': 'next' }));
      }
    }
  }

  // ---- run detail ---------------------------------------------------------------------------
  function eventText(ev) {
    const d = ev.data || {};
    switch (ev.type) {
      case 'run.created': return t('ev.created', { trigger: t('trigger.' + d.trigger) });
      case 'run.scheduled': return t('ev.scheduled', { at: fmtTime(d.scheduled_for_ms),
        late: fmtDur(d.late_ms) });
      case 'attempt.created': return t('ev.attemptCreated');
      case 'attempt.started': return t('ev.attemptStarted', { pid: d.pid });
      case 'run.started': return t('ev.started');
      case 'run.cancel_requested': return t('ev.cancelRequested', { reason: t('cancel.' + d.reason) });
      case 'attempt.signal_sent': return t('ev.signal', { signal: d.signal, epoch: d.epoch });
      case 'attempt.finished': return t('ev.attemptFinished', { status: statusLabel(d.status) }) +
        (d.exit_code != null ? ' · ' + t('runs.exit', { code: d.exit_code }) : '');
      case 'run.finished': return t('ev.finished', { status: statusLabel(d.status) }) +
        (d.exit_code != null ? ' · ' + t('runs.exit', { code: d.exit_code }) : '');
      case 'schedule.skipped': return t('ev.skipped', { at: fmtTime(d.scheduled_for_ms) });
      default: return ev.type + ' ' + JSON.stringify(d);
    }
  }

  function reasonText(code) {
    if (!code) return null;
    const key = 'reason.' + code;
    const text = t(key);
    return text === key ? t('reason.unknown') : text;
  }

  function viewRun(main, runId, alive) {
    const title = heading(main, t('run.title', { id: shortId(runId) }));
    const cancelBtn = btn(t('run.cancel'), async () => {
      const ok = await confirmDialog(t('run.cancelTitle'), t('run.cancelBody'), t('run.cancel'), true);
      if (!ok) return;
      try {
        await api('POST', `/runs/${encodeURIComponent(runId)}/cancel`);
        notify(t('run.cancelSent'), 'ok');
        refresh();
      } catch (e) { notify(e.message, 'error'); refresh(); }
    }, 'danger', { 'data-action': 'cancel-run', hidden: true });
    title.parentNode.querySelector('.actions').append(cancelBtn);

    const conn = h('div', { class: 'alert warn', role: 'status', hidden: true });
    const summary = h('section', { class: 'card summary', 'aria-labelledby': 'run-sum-h' },
      h('h2', { id: 'run-sum-h', class: 'sr-only' }, t('run.summary')));
    const logState = h('span', { class: 'log-state', id: 'log-state', 'data-state': 'connecting' },
      t('log.connecting'));
    const pre = h('pre', { class: 'log', id: 'log', role: 'log', tabIndex: 0,
      'aria-labelledby': 'log-h', 'aria-live': 'off' });
    const trimmed = h('p', { class: 'muted small', hidden: true }, t('log.trimmed'));
    const download = btn(t('log.download'), () => downloadLog(runId, download), 'small ghost',
      { 'data-action': 'download' });
    const logSec = h('section', { class: 'card', id: 'log-section', 'data-reconnects': '0' },
      h('div', { class: 'section-head' }, h('h2', { id: 'log-h' }, t('log.title')), logState,
        download),
      trimmed, pre);
    const timeline = h('ol', { class: 'timeline', id: 'timeline' });
    const attempts = h('div', null);
    main.append(conn, summary, logSec,
      h('section', { class: 'card', 'aria-labelledby': 'tl-h' },
        h('h2', { id: 'tl-h' }, t('run.timeline')), timeline),
      h('section', { class: 'card', 'aria-labelledby': 'att-h' },
        h('h2', { id: 'att-h' }, t('run.attempts')), attempts));

    let run = null;
    let taskName = null;
    let pollTimer = 0;
    let polling = false;
    let failures = 0;

    async function refresh() {
      if (polling) return;
      polling = true;
      try {
        const [r, evs] = await Promise.all([
          api('GET', `/runs/${encodeURIComponent(runId)}`),
          api('GET', `/runs/${encodeURIComponent(runId)}/events`)]);
        if (taskName == null) {
          taskName = await api('GET', `/tasks/${encodeURIComponent(r.task_id)}`)
            .then((tk) => tk.name, () => shortId(r.task_id));
        }
        if (!alive()) return;
        failures = 0;
        conn.hidden = true;
        run = r;
        paint(r, evs.items);
      } catch (e) {
        if (!alive()) return;
        if (e.status === 404) {
          clear(summary).append(h('div', { class: 'alert error', role: 'alert' }, t('run.missing')));
          stopPolling();
          return;
        }
        failures += 1;
        conn.textContent = t('run.reconnecting');
        conn.hidden = false;
      } finally {
        polling = false;
      }
      schedulePoll();
    }
    function schedulePoll() {
      clearTimeout(pollTimer);
      if (!alive() || (run && run.terminal)) return;
      pollTimer = setTimeout(refresh, Math.min(10000, 2000 * (1 + failures)));
    }
    function stopPolling() { clearTimeout(pollTimer); pollTimer = 0; }
    onLeave(stopPolling);

    function paint(r, events) {
      document.title = `${t('run.title', { id: shortId(r.id) })} · ${statusLabel(r.status)} · qledge`;
      cancelBtn.hidden = r.terminal;
      cancelBtn.disabled = r.cancel_reason != null;
      cancelBtn.textContent = r.cancel_reason != null ? t('run.cancelPending') : t('run.cancel');
      const now = Date.now();
      const reason = reasonText(r.reason_code);
      clear(summary).append(
        h('h2', { id: 'run-sum-h', class: 'sr-only' }, t('run.summary')),
        h('div', { class: 'status-line' }, h('span', { id: 'run-status' }, badge(r.status)),
          r.exit_code != null
            ? h('span', { class: 'exit big', id: 'run-exit' }, t('runs.exit', { code: r.exit_code }))
            : null,
          r.reason_code ? h('span', { class: 'muted' }, h('code', null, r.reason_code)) : null),
        reason ? h('p', { class: 'reason', id: 'run-reason' }, reason) : null,
        dl([
          [t('run.task'), h('a', { href: '#/tasks/' + r.task_id }, taskName || shortId(r.task_id))],
          [t('run.id'), h('code', { class: 'wrap' }, r.id)],
          [t('run.trigger'), t('trigger.' + r.trigger)],
          [t('run.created'), fmtTime(r.created_at_ms)],
          [t('run.started'), fmtTime(r.started_at_ms)],
          [t('run.finished'), fmtTime(r.finished_at_ms)],
          [t('run.waited'), r.started_at_ms ? fmtDur(r.started_at_ms - r.created_at_ms)
            : (r.terminal ? '—' : fmtDur(now - r.created_at_ms))],
          [t('run.duration'), r.started_at_ms
            ? fmtDur((r.finished_at_ms || now) - r.started_at_ms) + (r.finished_at_ms ? '' : ' …')
            : '—'],
          r.cancel_reason ? [t('run.cancelReason'), t('cancel.' + r.cancel_reason)] : null,
        ]));
      clear(timeline).append(...events.map((ev) => h('li', { 'data-type': ev.type,
        class: 'ev ev-' + ev.type.replace(/\W/g, '-') },
        h('time', { datetime: new Date(ev.at_ms).toISOString() }, fmtTime(ev.at_ms)),
        h('span', { class: 'muted small' }, ' +' + fmtDur(ev.at_ms - r.created_at_ms)),
        h('div', { class: 'ev-text' }, eventText(ev)),
        ev.type === 'run.finished' && ev.data && ev.data.reason_code
          ? h('div', { class: 'muted small' }, h('code', null, ev.data.reason_code), ' — ',
            reasonText(ev.data.reason_code))
          : null)));
      const cols = [t('att.no'), t('att.status'), t('att.exit'), t('att.reason'), t('att.pid'),
        t('att.started'), t('att.duration')];
      clear(attempts).append(r.attempts.length ? h('table', { class: 'grid' },
        h('thead', null, h('tr', null, cols.map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', null, r.attempts.map((a) => h('tr', null,
          h('td', { 'data-label': cols[0] }, '#' + a.attempt_no),
          h('td', { 'data-label': cols[1] }, badge(a.status === 'preparing' ? 'queued' : a.status)),
          h('td', { 'data-label': cols[2] }, a.exit_code == null ? '—' : String(a.exit_code)),
          h('td', { 'data-label': cols[3] }, a.reason_code ? h('code', null, a.reason_code) : '—'),
          h('td', { 'data-label': cols[4] }, a.pid == null ? '—' : String(a.pid)),
          h('td', { 'data-label': cols[5] }, fmtTime(a.started_at_ms)),
          h('td', { 'data-label': cols[6] }, a.started_at_ms
            ? fmtDur((a.finished_at_ms || now) - a.started_at_ms) : '—')))))
        : h('p', { class: 'muted' }, t('run.noAttempts')));
    }

    refresh();
    follow(runId, pre, logState, logSec, trimmed, alive, () => { stopPolling(); refresh(); });
  }

  /* The live log. EventSource would reconnect on its own, but with the same URL —
   * whose ticket is already spent — so errors are handled here: close, back off, get a
   * new ticket and reopen from the last offset we hold (the `id` of the last `log`
   * event = the next byte offset), so nothing is shown twice or skipped. */
  function follow(runId, pre, stateEl, section, trimmedNote, alive, onEnd) {
    let offset = 0;
    let es = null;
    let done = false;
    let retry = 0;
    let timer = 0;
    let reconnects = 0;
    let kept = 0;
    const setState = (state, text) => { stateEl.dataset.state = state; stateEl.textContent = text; };
    const stop = () => { done = true; clearTimeout(timer); if (es) { es.close(); es = null; } };
    onLeave(stop);

    function appendText(text) {
      const stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 24;
      pre.append(document.createTextNode(text));
      kept += text.length;
      if (kept > LOG_KEEP) {
        const all = pre.textContent;
        pre.textContent = all.slice(all.length - LOG_KEEP / 2);
        kept = pre.textContent.length;
        trimmedNote.hidden = false;
      }
      if (stick) pre.scrollTop = pre.scrollHeight;
    }

    function again() {
      if (done || !alive()) return;
      const delay = Math.min(5000, 250 * 2 ** retry) * (0.8 + Math.random() * 0.4);
      retry += 1;
      setState('reconnecting', t('log.reconnecting'));
      timer = setTimeout(open, delay);
    }

    async function open() {
      if (done || !alive()) return;
      let ticket;
      try {
        ticket = await api('POST', `/runs/${encodeURIComponent(runId)}/log/ticket`);
      } catch (e) {
        if (e.status === 404) { setState('gone', t('log.gone')); done = true; return; }
        if (e.status === 401) return; // signed out
        again();
        return;
      }
      if (done || !alive()) return;
      const url = `/api/v1/runs/${encodeURIComponent(runId)}/log/stream` +
        q({ offset, ticket: ticket.ticket });
      const source = new EventSource(url);
      es = source;
      source.addEventListener('open', () => {
        retry = 0;
        setState('live', t('log.live'));
      });
      source.addEventListener('log', (ev) => {
        const next = Number(ev.lastEventId);
        if (!(next > offset)) return; // never show a byte range twice
        appendText(JSON.parse(ev.data).text);
        offset = next;
        pre.dataset.offset = String(offset);
      });
      source.addEventListener('evicted', (ev) => {
        // retention deleted the log file; the run itself is kept (docs/retention.md)
        const info = JSON.parse(ev.data);
        trimmedNote.textContent = t('log.evicted', { reason: info.reason || '' });
        trimmedNote.hidden = false;
        section.dataset.evicted = 'true';
      });
      source.addEventListener('end', (ev) => {
        source.close();
        es = null;
        done = true;
        const end = JSON.parse(ev.data);
        setState('ended', t('log.ended', { status: statusLabel(end.status) }));
        onEnd(end);
      });
      source.onerror = () => {
        if (es !== source) return;
        source.close();
        es = null;
        reconnects += 1;
        section.dataset.reconnects = String(reconnects);
        again();
      };
    }
    open();
  }

  async function downloadLog(runId, button) {
    button.disabled = true;
    try {
      const parts = [];
      let offset = 0;
      for (;;) {
        const res = await api('GET', `/runs/${encodeURIComponent(runId)}/log` + q({ offset }),
          undefined, { raw: true });
        const buf = await res.arrayBuffer();
        if (!buf.byteLength) break;
        parts.push(buf);
        offset = Number(res.headers.get('X-Log-Next-Offset'));
      }
      const url = URL.createObjectURL(new Blob(parts, { type: 'text/plain' }));
      const a = h('a', { href: url, download: `run-${runId}.log`, hidden: true });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (e) {
      notify(e.message, 'error');
    } finally {
      button.disabled = false;
    }
  }

  // ---- envs ----------------------------------------------------------------------------------
  function viewEnvs(main, alive) {
    heading(main, t('envs.title'),
      btn(t('envs.new'), () => edit(null), 'primary', { 'data-action': 'new-env' }));
    main.append(h('p', { class: 'muted' }, t('envs.intro')));
    const formBox = h('div', null);
    const list = h('div', { class: 'card' }, h('p', { class: 'muted' }, t('common.loading')));
    main.append(formBox, list);
    const revealed = new Set();

    function edit(env) {
      clear(formBox);
      const nameI = h('input', { id: 'e-name', type: 'text', value: env ? env.name : '',
        class: 'mono', autocomplete: 'off', spellcheck: 'false', required: true });
      const valueI = h('input', { id: 'e-value', type: 'password', value: env ? env.value : '',
        class: 'mono', autocomplete: 'off', spellcheck: 'false' });
      const show = h('input', { id: 'e-show', type: 'checkbox',
        onchange: () => { valueI.type = show.checked ? 'text' : 'password'; } });
      const remarksI = h('input', { id: 'e-remarks', type: 'text', value: env ? env.remarks : '',
        autocomplete: 'off' });
      const enabledI = h('input', { id: 'e-enabled', type: 'checkbox',
        checked: env ? env.enabled : true });
      const formErr = h('div', { class: 'alert error', role: 'alert', hidden: true });
      const titleId = nextId('envf');
      const form = h('form', { class: 'card form', novalidate: true, 'aria-labelledby': titleId },
        h('h2', { id: titleId, tabIndex: -1 }, env ? t('envs.editTitle', { name: env.name })
          : t('envs.newTitle')),
        formErr,
        field('e-name', t('envs.name'), nameI, t('envs.nameHelp'), 'name'),
        field('e-value', t('envs.value'), valueI, null, 'value'),
        h('div', { class: 'field check' }, show, h('label', { htmlFor: 'e-show' }, t('envs.show'))),
        field('e-remarks', t('envs.remarks'), remarksI, null, 'remarks'),
        h('div', { class: 'field check' }, enabledI,
          h('label', { htmlFor: 'e-enabled' }, t('envs.enabled'))),
        h('div', { class: 'actions' },
          h('button', { type: 'submit', class: 'btn primary' }, env ? t('common.save') : t('envs.add')),
          btn(t('common.cancel'), () => clear(formBox), 'ghost')));
      form.addEventListener('submit', async (e) => {
        e.preventDefault();
        formErr.hidden = true;
        for (const el of form.querySelectorAll('.field-error')) el.hidden = true;
        const body = { name: nameI.value.trim(), value: valueI.value, remarks: remarksI.value,
          enabled: enabledI.checked };
        try {
          if (env) await api('PUT', `/envs/${encodeURIComponent(env.id)}`, body);
          else await api('POST', '/envs', body);
          notify(t('envs.saved', { name: body.name }), 'ok');
          clear(formBox);
          load();
        } catch (ex) {
          const wrap = ex.field && form.querySelector(`[data-field="${ex.field}"]`);
          if (wrap) {
            const errEl = wrap.querySelector('.field-error');
            errEl.textContent = ex.message; errEl.hidden = false;
            const ctl = wrap.querySelector('input');
            ctl.setAttribute('aria-invalid', 'true');
            ctl.setAttribute('aria-describedby', errEl.id);
            ctl.focus();
          } else {
            formErr.textContent = ex.message; formErr.hidden = false;
          }
        }
      });
      formBox.append(form);
      nameI.focus();
    }

    async function load() {
      let envs;
      try {
        envs = (await api('GET', '/envs')).items;
      } catch (e) {
        if (alive()) { clear(list); failBox(list, e); }
        return;
      }
      if (!alive()) return;
      clear(list);
      if (!envs.length) { list.append(h('p', { class: 'empty' }, t('envs.empty'))); return; }
      const cols = [t('envs.name'), t('envs.value'), t('envs.remarks'), t('envs.state'),
        t('tasks.col.actions')];
      list.append(h('table', { class: 'grid' },
        h('caption', { class: 'sr-only' }, t('envs.title')),
        h('thead', null, h('tr', null, cols.map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', null, envs.map((env) => {
          const valueCell = h('td', { 'data-label': cols[1] });
          const paintValue = () => {
            const on = revealed.has(env.id);
            clear(valueCell).append(
              on ? h('code', { class: 'wrap env-val' }, env.value)
                : h('span', { class: 'masked', 'aria-label': t('envs.hidden') }, '••••••••'), ' ',
              btn(on ? t('envs.hide') : t('envs.reveal'), () => {
                if (revealed.has(env.id)) revealed.delete(env.id); else revealed.add(env.id);
                paintValue();
                valueCell.querySelector('button').focus();
              }, 'small ghost', { 'aria-pressed': on ? 'true' : 'false',
                'aria-label': (on ? t('envs.hide') : t('envs.reveal')) + ' ' + env.name }));
          };
          paintValue();
          return h('tr', { 'data-env-name': env.name },
            h('td', { 'data-label': cols[0] }, h('code', null, env.name)),
            valueCell,
            h('td', { 'data-label': cols[2] }, env.remarks || '—'),
            h('td', { 'data-label': cols[3] }, h('span', { class: env.enabled ? 'on' : 'off' },
              env.enabled ? t('envs.on') : t('envs.off'))),
            h('td', { 'data-label': cols[4], class: 'row-actions' },
              btn(t('common.edit'), () => edit(env), 'small',
                { 'aria-label': `${t('common.edit')} — ${env.name}` }),
              btn(env.enabled ? t('tasks.disable') : t('tasks.enable'), async () => {
                try {
                  await api('PUT', `/envs/${encodeURIComponent(env.id)}`, { enabled: !env.enabled });
                  load();
                } catch (e) { notify(e.message, 'error'); }
              }, 'small', { 'aria-label': `${env.enabled ? t('tasks.disable') : t('tasks.enable')} — ${env.name}` }),
              btn(t('common.delete'), async () => {
                const ok = await confirmDialog(t('envs.deleteTitle'),
                  t('envs.deleteBody', { name: env.name }), t('common.delete'), true);
                if (!ok) return;
                try { await api('DELETE', `/envs/${encodeURIComponent(env.id)}`); load(); }
                catch (e) { notify(e.message, 'error'); }
              }, 'small danger-ghost', { 'aria-label': `${t('common.delete')} — ${env.name}` })));
        }))));
    }
    load();
  }

  // ---- system --------------------------------------------------------------------------------
  function countsTable(report) {
    if (!report) return h('p', { class: 'muted' }, t('system.noRound'));
    const counts = Object.entries(report.counts || {});
    return h('div', null,
      dl([[t('system.kind'), report.kind],
        [t('system.when'), fmtTime(report.finished_at_ms || report.started_at_ms)],
        [t('system.took'), report.finished_at_ms
          ? fmtDur(report.finished_at_ms - report.started_at_ms) : '—'],
        [t('system.examined'), String(report.examined)]]),
      counts.length ? h('table', { class: 'grid compact' },
        h('thead', null, h('tr', null, h('th', { scope: 'col' }, t('system.outcome')),
          h('th', { scope: 'col' }, t('system.count')))),
        h('tbody', null, counts.map(([k, v]) => h('tr', null,
          h('td', { 'data-label': t('system.outcome') }, h('code', null, k)),
          h('td', { 'data-label': t('system.count') }, String(v))))))
        : h('p', { class: 'muted small' }, t('system.nothing')));
  }

  function volumesView(volumes) {
    const list = Array.isArray(volumes) ? volumes
      : Object.entries(volumes).map(([name, v]) => ({ name, ...(typeof v === 'object' && v ? v : {}) }));
    return h('div', { class: 'volumes' }, list.map((v) => {
      const total = v.total_bytes;
      const free = v.free_bytes;
      const used = v.used_bytes ?? (total != null && free != null ? total - free : null);
      const pct = total ? Math.round((100 * used) / total) : null;
      return h('div', { class: 'volume' + (v.pressure ? ' warn' : ''), 'data-volume': v.name },
        h('div', { class: 'vol-head' }, h('strong', null, v.name || '?'),
          v.pressure ? h('span', { class: 'badge badge-timed_out' }, t('system.lowSpace')) : null),
        pct != null ? h('meter', { min: 0, max: 100, value: pct, low: 80, high: 92, optimum: 0,
          'aria-label': t('system.volUse', { name: v.name || '' }) }) : null,
        h('div', { class: 'small' }, [
          used != null ? t('system.used', { n: fmtBytes(used) }) : null,
          free != null ? t('system.free', { n: fmtBytes(free) }) : null,
          total != null ? t('system.total', { n: fmtBytes(total) }) : null,
          pct != null ? `${pct}%` : null,
          v.low_water_bytes != null ? t('system.lowWater', { n: fmtBytes(v.low_water_bytes) }) : null,
        ].filter(Boolean).join(' · ')),
        v.error ? h('div', { class: 'field-error small' }, String(v.error)) : null);
    }));
  }

  function viewSystem(main, alive) {
    heading(main, t('system.title'),
      btn(t('common.refresh'), () => load(), 'ghost', { 'data-action': 'refresh' }));
    const box = h('div', { class: 'system' }, h('p', { class: 'muted' }, t('common.loading')));
    main.append(box);
    async function load() {
      let s;
      try { s = await api('GET', '/system'); } catch (e) {
        if (alive()) { clear(box); failBox(box, e); }
        return;
      }
      if (!alive()) return;
      const j = s.journal || {};
      clear(box).append(
        h('section', { class: 'card', 'aria-labelledby': 'sys-h1' },
          h('h2', { id: 'sys-h1' }, t('system.appliance')),
          dl([[t('system.version'), s.version],
            [t('system.profile'), s.profile],
            [t('system.node'), h('code', { class: 'wrap' }, s.node_id)],
            [t('system.uptime'), fmtDur((s.uptime_s || 0) * 1000)],
            [t('system.ready'), s.ready ? t('common.yes') : t('common.no')],
            [t('system.watched'), String(s.watched_attempts ?? '—')],
            [t('system.streams'), String(s.log_streams ?? '—')],
            [t('system.rounds'), String(s.rounds ?? '—')]])),
        h('section', { class: 'card', 'aria-labelledby': 'sys-h2' },
          h('h2', { id: 'sys-h2' }, t('system.journal')),
          h('div', { class: 'stats' },
            stat(t('system.backlog'), s.journal_backlog, 'backlog'),
            stat(t('system.active'), j.active ?? 0, 'active'),
            stat(t('system.terminal'), j.terminal ?? 0, 'terminal'),
            stat(t('system.quarantined'), j.quarantined ?? 0, 'quarantined',
              (j.quarantined || 0) > 0)),
          h('p', { class: 'muted small' }, t('system.journalHelp'))),
        s.volumes ? h('section', { class: 'card', 'aria-labelledby': 'sys-h5' },
          h('h2', { id: 'sys-h5' }, t('system.volumes')),
          s.pressure && s.pressure.state === 'pressure'
            ? h('div', { class: 'alert warn', role: 'status' }, t('system.pressure',
              { reason: s.pressure.reason || '' })) : null,
          volumesView(s.volumes),
          s.retention && s.retention.logs_total_bytes != null
            ? h('p', { class: 'small muted' }, t('system.logsUse', {
              n: fmtBytes(s.retention.logs_total_bytes),
              cap: s.retention.logs_cap_bytes ? fmtBytes(s.retention.logs_cap_bytes) : '—',
              runs: s.retention.runs_kept ?? '—' })) : null) : null,
        h('section', { class: 'card', 'aria-labelledby': 'sys-h3' },
          h('h2', { id: 'sys-h3' }, t('system.lastRound')), countsTable(s.last_round)),
        h('section', { class: 'card', 'aria-labelledby': 'sys-h4' },
          h('h2', { id: 'sys-h4' }, t('system.startup')), countsTable(s.startup_recovery)));
    }
    function stat(label, value, key, warn) {
      return h('div', { class: 'stat' + (warn ? ' warn' : ''), 'data-stat': key },
        h('div', { class: 'stat-value' }, String(value ?? '—')),
        h('div', { class: 'stat-label' }, label));
    }
    load();
  }

  // ---- start ---------------------------------------------------------------------------------
  window.addEventListener('hashchange', render);
  window.addEventListener('storage', (e) => {
    if (e.key === K_LANG && e.newValue && STRINGS[e.newValue] && e.newValue !== lang) setLang(e.newValue);
  });
  render();
})();
