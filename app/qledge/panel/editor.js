/* qledge panel: the task editor (#/tasks/new, #/tasks/<id>). */
import { t, fmtTime, fmtRelative, h, clear, fill, btn, field, markField, unmark, loading, apiPath,
  notify, api, q, loadAllTasks, onLeave, heading, failBox } from './core.js';
import { taskMute } from './taskmute.js';
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const MAX_TIMEOUT_S = 366 * 86400;
const CHAINS = ['on_success', 'on_failure', 'on_finish'];

// #/tasks/new?name=&command=&schedule= prefills a new task (the Scripts page's
// "Create task from this script").
function viewTaskEditor(main, taskId, alive, query) {
  heading(main, taskId ? t('editor.editTitle') : t('tasks.new'));
  const box = h('div', loading());
  main.append(box);
  const prefill = {};
  for (const k of ['name', 'command', 'schedule']) {
    if (!taskId && query && query.get(k)) prefill[k] = query.get(k);
  }
  const get = taskId ? api('GET', apiPath('tasks', taskId)) : Promise.resolve(null);
  get.then((task) => { if (alive()) { clear(box); buildTaskForm(box, task, alive, prefill);
    if (task) box.append(taskMute(task)); } },
    (e) => { if (alive()) failBox(box, e); });
}

function envEditor(env) {
  const rows = h('div.env-rows');
  let n = 0;
  function addRow(key, value, focus) {
    n += 1;
    const kId = `f-env-k-${n}`;
    const vId = `f-env-v-${n}`;
    const k = h('input.mono.env-key', { id: kId, type: 'text', value: key || '',
      autocomplete: 'off', spellcheck: 'false', placeholder: 'NAME' });
    const val = h('input.mono.env-value', { id: vId, type: 'text', value: value || '',
      autocomplete: 'off', spellcheck: 'false' });
    const row = h('div.env-row', h('label.sr-only', { htmlFor: kId }, t('editor.envName', { n })), k,
      h('span.eq', { 'aria-hidden': 'true' }, '='),
      h('label.sr-only', { htmlFor: vId }, t('editor.envValue', { n })), val,
      btn(t('common.remove'), () => { row.remove(); addBtn.focus(); }, 'small ghost',
        { 'aria-label': t('editor.envRemove', { n }) }));
    rows.append(row);
    if (focus) k.focus();
  }
  const addBtn = btn(t('editor.envAdd'), () => addRow('', '', true), 'small',
    { id: 'f-env-add' });
  for (const [k, val] of Object.entries(env || {})) addRow(k, val, false);
  const el = h('fieldset.field', { 'data-field': 'env', id: 'f-env' },
    h('legend', t('editor.env')),
    h('p.help', { id: 'f-env-help' }, t('editor.envHelp')),
    rows, addBtn,
    h('p.field-error', { id: 'f-env-err', hidden: true }));
  const entries = () => [...rows.querySelectorAll('.env-row')].map((row) => ({
    keyInput: row.querySelector('.env-key'),
    key: row.querySelector('.env-key').value.trim(),
    value: row.querySelector('.env-value').value,
  })).filter((e) => e.key || e.value);
  return { el, entries };
}

// Debounced; stale answers are dropped. Times are shown in the task's zone (`tz`
// field), or the appliance's when it is empty, and the text says which (issue #37).
function schedulePreview(schedule, tzInput, preview, alive) {
  let seq = 0;
  let timer = 0;
  function now() {
    const expr = schedule.value.trim();
    const mine = ++seq;
    if (!expr) {
      fill(preview, h('p.muted', t('editor.noSchedule')));
      return;
    }
    fill(preview, h('p.muted', t('editor.previewing')));
    const tz = tzInput.value.trim();
    api('GET', '/cron/preview' + q({ schedule: expr, n: 5, tz })).then((res) => {
      if (mine !== seq || !alive()) return;
      const own = res.zone_source === 'task';
      if (!own) tzInput.placeholder = t('editor.tzEmpty', { tz: res.timezone });
      fill(preview,
        h('p.small.muted', { 'data-zone': res.timezone, 'data-zone-source': res.zone_source },
          t(own ? 'editor.previewTaskTz' : 'editor.previewTz', { tz: res.timezone })),
        h('ol.fire-times', res.next.map((n) =>
          h('li', h('time', { datetime: n.at }, fmtTime(n.at_ms, res.timezone)),
            h('span.muted.small', ' · ' + fmtRelative(n.at_ms))))));
    }, (e) => {
      if (mine !== seq || !alive()) return;
      fill(preview, h('p.preview-error', e.message));
    });
  }
  for (const input of [schedule, tzInput]) {
    input.addEventListener('input', () => {
      preview.hidden = false;
      clearTimeout(timer);
      timer = setTimeout(now, 300);
    });
  }
  onLeave(() => clearTimeout(timer));
  now();
}

/* Every problem at once, as [field, message, control?] in form order, by the API's rules
 * (http/tasks.py); the API judges the schedule (preview endpoint) and stays the judge. */
async function problems(f, envs) {
  const found = [];
  const name = f.name.value.trim();
  if (!name || name.length > 200) found.push(['name', t('editor.nameBad')]);
  if (!f.command.value.trim()) found.push(['command', t('editor.commandEmpty')]);
  const expr = f.schedule.value.trim();
  if (expr) {
    try {
      await api('GET', '/cron/preview' + q({ schedule: expr, n: 1 }));
    } catch (e) {
      if (e.status === 422) found.push(['schedule', e.message]);
      else if (e.status === 401) throw e;
    }
  }
  const tv = f.timeout.value.trim();
  if (tv && !(/^\d+$/.test(tv) && Number(tv) >= 1 && Number(tv) <= MAX_TIMEOUT_S)) {
    found.push(['timeout_s', t('editor.timeoutBad')]);
  }
  const seen = new Set();
  for (const e of envs) {
    let why = null;
    if (!e.key) why = t('editor.envNoName');
    else if (!ENV_NAME.test(e.key) || e.key.length > 256) {
      why = t('editor.envBadName', { name: e.key });
    }
    else if (seen.has(e.key)) why = t('editor.envDup', { name: e.key });
    seen.add(e.key);
    if (why) found.push(['env', why, e.keyInput]);
  }
  const labels = f.labels.value.split(',').map((s) => s.trim()).filter(Boolean);
  if (labels.some((l) => l.length > 100)) found.push(['labels', t('editor.labelTooLong')]);
  return found;
}

function buildTaskForm(box, task, alive, prefill) {
  const v = task || { name: '', command: '', schedule: null, timeout_s: null, env: {},
    enabled: true, overlap: 'skip', labels: [], keep_background: false, retries: 0,
    retry_delay_s: 10, retry_on: ['failed', 'lost'], extra_schedules: [], tz: null,
    on_success: [], on_failure: [], on_finish: [], ...prefill };
  const place = v.placement || { node: null, labels: [] };
  // The saved ids at once (the form does not wait), then the other tasks by name; an id no
  // task has any more stays, shown as the id.
  const picked = (sel) => [...sel.selectedOptions].map((o) => o.value);
  const opts = (sel, names, ids) => fill(sel, [...new Set([...names.keys(), ...ids])]
    .filter((id) => id !== task?.id).map((id) =>
      h('option', { value: id, selected: ids.includes(id) }, names.get(id) || id)));
  const chain = (k) => opts(h('select', { id: 'f-' + k, multiple: true, size: 4,
    'aria-describedby': 'f-chain-help' }), new Map(), v[k]);
  const ro = ['failed', 'timed_out', 'lost'].map((s) => h('input', { id: 'f-ro-' + s,
    type: 'checkbox', value: s, checked: v.retry_on.includes(s) }));
  const num = (id, min, max, val) => h('input', { id, type: 'number', min, max, step: 1,
    inputmode: 'numeric', value: String(val) });
  const f = {
    name: h('input', { id: 'f-name', type: 'text', value: v.name, required: true,
      maxlength: 200, autocomplete: 'off' }),
    command: h('textarea', { id: 'f-command', rows: 4, required: true, spellcheck: 'false',
      class: 'mono' }),
    schedule: h('input', { id: 'f-schedule', type: 'text', value: v.schedule || '',
      class: 'mono', autocomplete: 'off', spellcheck: 'false', placeholder: '*/5 * * * *' }),
    timeout: h('input', { id: 'f-timeout', type: 'number', min: 1, step: 1,
      inputmode: 'numeric', value: v.timeout_s == null ? '' : String(v.timeout_s) }),
    overlap: h('select', { id: 'f-overlap' }, ...['skip', 'queue', 'replace', 'allow'].map(
      (o) => h('option', { value: o, selected: v.overlap === o }, t('editor.ov.' + o)))),
    retries: num('f-retries', 0, 10, v.retries),
    retryDelay: num('f-retry-delay', 0, 86400, v.retry_delay_s),
    enabled: h('input', { id: 'f-enabled', type: 'checkbox', checked: v.enabled }),
    keepBackground: h('input', { id: 'f-keep-bg', type: 'checkbox',
      checked: !!v.keep_background, 'aria-describedby': 'f-keep-bg-help' }),
    extra: h('textarea', { id: 'f-extra', rows: 2, class: 'mono', spellcheck: 'false' }),
    tz: h('input', { id: 'f-tz', type: 'text', value: v.tz || '', autocomplete: 'off',
      placeholder: t('editor.tzEmpty', { tz: '…' }) }),
    ...Object.fromEntries(CHAINS.map((k) => [k, chain(k)])),
    labels: h('input', { id: 'f-labels', type: 'text', value: v.labels.join(', '),
      autocomplete: 'off' }),
    // where its runs may execute (docs/fleet.md); both empty: any node
    placeNode: h('input', { id: 'f-place-node', type: 'text', value: place.node || '',
      autocomplete: 'off', spellcheck: 'false' }),
    placeLabels: h('input', { id: 'f-place-labels', type: 'text', class: 'mono',
      value: place.labels.join(' '), autocomplete: 'off', spellcheck: 'false' }),
  };
  f.command.value = v.command;
  f.extra.value = v.extra_schedules.join('\n');
  const preview = h('div.preview', { id: 'f-schedule-preview', 'aria-live': 'polite' });
  const envs = envEditor(v.env);
  const formErr = h('div.alert.error', { role: 'alert', hidden: true, tabIndex: -1 });
  const submit = h('button.btn.primary', { type: 'submit' },
    task ? t('common.save') : t('editor.create'));
  const form = h('form.card.form', { novalidate: true },
    formErr,
    field('f-name', t('tasks.col.name'), f.name, null, 'name'),
    field('f-command', t('editor.command'), f.command, t('editor.commandHelp'), 'command'),
    field('f-schedule', t('editor.schedule'), f.schedule, t('editor.scheduleHelp'), 'schedule'),
    preview,
    h('div.row2',
      field('f-timeout', t('editor.timeout'), f.timeout, t('editor.timeoutHelp'), 'timeout_s'),
      field('f-overlap', t('editor.concurrency'), f.overlap,
        t('editor.concurrencyHelp'), 'overlap')),
    h('div', { class: 'row2' },
      field('f-retries', t('editor.retries'), f.retries, t('editor.retriesHelp'), 'retries'),
      field('f-retry-delay', t('editor.retryDelay'), f.retryDelay, null, 'retry_delay_s')),
    h('fieldset.field.check', { 'data-field': 'retry_on' }, h('legend', t('editor.retryOn')),
      ro.map((c) => [c, h('label', { htmlFor: c.id }, t('status.' + c.value))]),
      h('p.field-error', { id: 'f-retry-on-err', hidden: true })),
    h('div.row2',
      field('f-extra', t('editor.extra'), f.extra, null, 'extra_schedules'),
      field('f-tz', t('editor.tz'), f.tz, t('editor.tzHelp'), 'tz')),
    h('fieldset.field', h('legend', t('editor.chains')),
      h('p.help', { id: 'f-chain-help' }, t(matchMedia('(pointer: coarse)').matches
        ? 'editor.chainHelpTouch' : 'editor.chainHelp')),
      h('div.row3', CHAINS.map((k) => field('f-' + k, t('editor.' + k), f[k], null, k)))),
    envs.el,
    field('f-labels', t('editor.labels'), f.labels, t('editor.labelsHelp'), 'labels'),
    h('div.row2', field('f-place-node', t('place.node'), f.placeNode, t('place.help'),
      'placement'), field('f-place-labels', t('place.labels'), f.placeLabels)),
    h('div.field.check', { 'data-field': 'enabled' }, f.enabled,
      h('label', { htmlFor: 'f-enabled' }, t('editor.enabled')),
      h('p.field-error', { id: 'f-enabled-err', hidden: true })),
    // off: what the command leaves running is ended at its exit and counted (docs/tasks.md)
    h('div.field.check', { 'data-field': 'keep_background' }, f.keepBackground,
      h('label', { htmlFor: 'f-keep-bg' }, t('editor.keepBackground')),
      h('p.help', { id: 'f-keep-bg-help' }, t('editor.keepBackgroundHelp')),
      h('p.field-error', { id: 'f-keep-bg-err', hidden: true })),
    h('div.actions', submit,
      h('a.btn.ghost', { href: '#/tasks' }, t('common.cancel'))));
  box.append(form);
  schedulePreview(f.schedule, f.tz, preview, alive);
  loadAllTasks().then((all) => {
    const names = new Map(all.map((x) => [x.id, x.name]));
    if (alive()) for (const k of CHAINS) opts(f[k], names, picked(f[k]));
  }, (e) => { if (alive()) form.querySelector('#f-chain-help').textContent = e.message; });

  function markError(name, message, ctl) {
    if (name === 'schedule') preview.hidden = true; // says the same; back on input
    return markField(form, formErr, name, message, ctl);
  }

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    unmark(form, formErr);
    preview.hidden = false;
    submit.disabled = true;
    try {
      const found = await problems(f, envs.entries());
      if (found.length) {
        const first = found.map(([name, message, ctl]) => markError(name, message, ctl))[0];
        first.focus();
        return;
      }
      const tv = f.timeout.value.trim();
      const body = {
        name: f.name.value, command: f.command.value,
        schedule: f.schedule.value.trim() || null,
        timeout_s: tv ? Number(tv) : null,
        env: Object.fromEntries(envs.entries().map((x) => [x.key, x.value])),
        enabled: f.enabled.checked, overlap: f.overlap.value,
        retries: Number(f.retries.value || 0), retry_delay_s: Number(f.retryDelay.value || 0),
        keep_background: f.keepBackground.checked,
        retry_on: ro.filter((c) => c.checked).map((c) => c.value),
        extra_schedules: f.extra.value.split('\n').map((s) => s.trim()).filter(Boolean),
        tz: f.tz.value.trim() || null,
        ...Object.fromEntries(CHAINS.map((k) => [k, picked(f[k])])),
        labels: f.labels.value.split(',').map((s) => s.trim()).filter(Boolean),
        placement: { node: f.placeNode.value.trim() || null,
          labels: f.placeLabels.value.split(/\s+/).filter(Boolean) },
      };
      if (task) await api('PUT', apiPath('tasks', task.id), body);
      else await api('POST', '/tasks', body);
      notify(t(task ? 'editor.saved' : 'editor.created', { name: body.name.trim() }), 'ok');
      location.hash = '#/tasks';
    } catch (ex) {
      markError(ex.field, ex.message).focus();
    } finally {
      submit.disabled = false;
    }
  });
}

export { viewTaskEditor };
