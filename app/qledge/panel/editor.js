/* qledge panel: the task editor (#/tasks/new, #/tasks/<id>). */
'use strict';
(() => {
  const { t, fmtTime, fmtRelative, h, clear, fill, btn, field, notify, api, q, onLeave, heading,
    failBox } = window.QLEDGE;

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
        fill(preview, h('p', { class: 'muted' }, t('editor.noSchedule')));
        return;
      }
      fill(preview, h('p', { class: 'muted' }, t('editor.previewing')));
      api('GET', '/cron/preview' + q({ schedule: expr, n: 5 })).then((res) => {
        if (mine !== seq || !alive()) return;
        fill(preview,
          h('p', { class: 'small muted' }, t('editor.previewTz', { tz: res.timezone })),
          h('ol', { class: 'fire-times' }, res.next.map((n) =>
            h('li', null, h('time', { datetime: n.at }, fmtTime(n.at_ms, res.timezone)),
              h('span', { class: 'muted small' }, ' · ' + fmtRelative(n.at_ms))))));
      }, (e) => {
        if (mine !== seq || !alive()) return;
        fill(preview, h('p', { class: 'preview-error' }, e.message));
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

  window.QLEDGE.pages.taskEditor = viewTaskEditor;
})();
