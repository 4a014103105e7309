/* qledge panel: env variables (#/envs; docs/panel.md, Envs). */
import { t, h, clear, fill, nextId, btn, rowBtn, actionsCell, field, markField, unmark, loading,
  grid, row, guarded, apiPath, notify, confirmDialog, modal, api, heading, failBox, fmtTime,
  saveFile } from './core.js';
import { exportEnvs, parseEnvFile, splice } from './envfile.js';

function envForm(formBox, env, reload) {
  clear(formBox);
  const nameI = h('input.mono', { id: 'e-name', type: 'text', value: env ? env.name : '',
    autocomplete: 'off', spellcheck: 'false', required: true });
  // A textarea: a pasted multi-line value (a cookie) is kept byte for byte.
  const valueI = h('textarea.mono.env-value', { id: 'e-value', rows: 3, autocomplete: 'off',
    spellcheck: 'false', autocapitalize: 'off', class: 'masked-text' });
  let raw = env ? env.value : ''; // what is saved: CR LF kept (envfile.js, splice)
  valueI.value = raw;
  let shown = valueI.value;
  let pasted = null;
  valueI.addEventListener('paste', (e) => {
    pasted = e.clipboardData.getData('text/plain');
    e.preventDefault();
    if (!document.execCommand('insertText', false, pasted)) {
      valueI.setRangeText(pasted, valueI.selectionStart, valueI.selectionEnd, 'end');
      valueI.dispatchEvent(new Event('input'));
    }
  });
  valueI.addEventListener('input', () => {
    raw = splice(raw, shown, valueI.value, pasted);
    shown = valueI.value;
    pasted = null;
  });
  const show = h('input', { id: 'e-show', type: 'checkbox',
    onchange: () => { valueI.classList.toggle('masked-text', !show.checked); } });
  const remarksI = h('input', { id: 'e-remarks', type: 'text', value: env ? env.remarks : '',
    autocomplete: 'off' });
  const enabledI = h('input', { id: 'e-enabled', type: 'checkbox',
    checked: env ? env.enabled : true });
  const formErr = h('div.alert.error', { role: 'alert', hidden: true });
  const titleId = nextId('envf');
  const form = h('form.card.form', { novalidate: true, 'aria-labelledby': titleId },
    h('h2', { id: titleId, tabIndex: -1 }, env ? t('envs.editTitle', { name: env.name })
      : t('envs.new')),
    formErr,
    field('e-name', t('tasks.col.name'), nameI, t('envs.nameHelp') + ' ' + t('envs.dupHelp'), 'name'),
    field('e-value', t('envs.value'), valueI, t('envs.valueHelp'), 'value'),
    h('div.field.check', show, h('label', { htmlFor: 'e-show' }, t('envs.show'))),
    field('e-remarks', t('envs.remarks'), remarksI, null, 'remarks'),
    h('div.field.check', enabledI,
      h('label', { htmlFor: 'e-enabled' }, t('tasks.col.enabled'))),
    h('div.actions', h('button.btn.primary', { type: 'submit' }, env ? t('common.save') : t('editor.envAdd')),
      btn(t('common.cancel'), () => clear(formBox), 'ghost')));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    unmark(form, formErr);
    const body = { name: nameI.value.trim(), value: raw, remarks: remarksI.value,
      enabled: enabledI.checked };
    try {
      if (env) await api('PUT', apiPath('envs', env.id), body);
      else await api('POST', '/envs', body);
      notify(t('envs.saved', { name: body.name }), 'ok');
      clear(formBox);
      reload();
    } catch (ex) {
      markField(form, formErr, ex.field, ex.message).focus();
    }
  });
  formBox.append(form);
  nameI.focus();
}

// Values stay masked until revealed (`revealed` keeps that across reloads); a revealed
// value wraps in a row of its own under its env, so a long one never squeezes the columns.
function envRows(env, ctx, i, total, dups) {
  const { cols, revealed, selected, edit, reload } = ctx;
  const on = revealed.has(env.id);
  const pick = h('input', { type: 'checkbox', checked: selected.has(env.id),
    'aria-label': t('envs.select', { name: env.name }), 'data-role': 'pick',
    onchange: (e) => { if (e.target.checked) selected.add(env.id); else selected.delete(env.id); ctx.sync(); } });
  const move = (direction) => guarded(async () => {
    await api('POST', apiPath('envs', env.id, 'move'), { direction });
    reload();
  });
  const main = row({ 'data-env-name': env.name, 'data-env-id': env.id }, cols,
    pick,
    h('span.env-name', h('code', env.name),
      dups > 1 ? h('span.muted.small', { title: t('envs.dupHelp') }, ' ' + t('envs.joined', { n: dups })) : null),
    h('span.env-cell',
      on ? h('code.env-trunc', env.value) : h('span.masked', { 'aria-label': t('envs.hidden') }, '••••••••'),
      btn(on ? t('envs.hide') : t('envs.reveal'), () => {
        if (on) revealed.delete(env.id); else revealed.add(env.id);
        ctx.paint(env.id);
      }, 'small ghost', { 'aria-pressed': on ? 'true' : 'false', 'data-action': 'reveal',
        'aria-label': (on ? t('envs.hide') : t('envs.reveal')) + ' ' + env.name })),
    env.remarks || '—',
    h('span', { class: env.enabled ? 'on' : 'off' }, env.enabled ? t('envs.on') : t('envs.off')),
    h('span.small', fmtTime(env.updated_at_ms)),
    actionsCell(cols[6],
      rowBtn(t('common.edit'), env.name, () => edit(env), 'small'),
      rowBtn(env.enabled ? t('tasks.disable') : t('tasks.enable'), env.name, guarded(async () => {
        await api('PUT', apiPath('envs', env.id), { enabled: !env.enabled });
        reload();
      }), 'small'),
      rowBtn('↑', env.name + ' ' + t('envs.up'), move('up'), 'small ghost',
        { disabled: i === 0, title: t('envs.up'), 'data-action': 'up' }),
      rowBtn('↓', env.name + ' ' + t('envs.down'), move('down'), 'small ghost',
        { disabled: i === total - 1, title: t('envs.down'), 'data-action': 'down' }),
      rowBtn(t('common.delete'), env.name, guarded(async () => {
        if (!await confirmDialog(t('envs.deleteTitle'), t('envs.deleteBody', { name: env.name }),
          t('common.delete'), true)) return;
        await api('DELETE', apiPath('envs', env.id));
        reload();
      }), 'small danger-ghost')));
  if (!on) return [main];
  return [main, h('tr.env-reveal', { 'data-reveal-of': env.id },
    h('td', { colSpan: cols.length }, h('pre.env-full', { tabIndex: 0,
      'aria-label': t('envs.value') + ' ' + env.name }, env.value)))];
}

// Import: read the file, show what will be created, create all or nothing.
function importFile(existing, reload) {
  const input = h('input', { type: 'file', accept: '.json,application/json', hidden: true });
  input.addEventListener('change', async () => {
    const file = input.files[0];
    input.remove();
    if (!file) return;
    const got = parseEnvFile(await file.text());
    if (got.error) { notify(t('envs.importRefused', { reason: got.error }), 'error'); return; }
    const names = new Set(existing.map((e) => e.name));
    const m = modal(t('envs.importTitle', { n: got.items.length }));
    const ok = btn(t('envs.import'), guarded(async () => {
      ok.disabled = true;
      try {
        await api('POST', '/envs/import', { items: got.items });
        m.close();
        notify(t('envs.imported', { n: got.items.length }), 'ok');
        reload();
      } finally { ok.disabled = false; }
    }), 'primary', { 'data-action': 'confirm' });
    m.dialog.addEventListener('cancel', (e) => { e.preventDefault(); m.close(); });
    m.open(h('p', t('envs.importBody')),
      h('ul.import-list', { 'data-role': 'import-preview' }, got.items.map((it) => h('li',
        h('code', it.name), ' ',
        h('span.muted.small', (it.enabled ? t('envs.on') : t('envs.off'))
          + (names.has(it.name) ? ' · ' + t('envs.importDup') : '')
          + (it.remarks ? ' · ' + it.remarks : ''))))),
      h('div.actions', btn(t('common.cancel'), m.close, 'ghost', { 'data-action': 'cancel' }), ok));
  });
  document.body.append(input);
  input.click();
}

function viewEnvs(main, alive) {
  heading(main, t('envs.title'),
    btn(t('envs.importBtn'), () => importFile(all, load), '', { 'data-action': 'import' }),
    btn(t('envs.export'), () => {
      const picked = all.filter((e) => selected.has(e.id));
      saveFile(new Blob([exportEnvs(picked.length ? picked : all)], { type: 'application/json' }),
        'envs.json');
    }, '', { 'data-action': 'export' }),
    btn(t('envs.new'), () => edit(null), 'primary', { 'data-action': 'new-env' }));
  main.append(h('p.muted', t('envs.intro')));
  const formBox = h('div');
  const search = h('input', { type: 'search', id: 'env-search', 'data-role': 'search',
    autocomplete: 'off', spellcheck: 'false', placeholder: t('envs.search'),
    'aria-label': t('envs.search') });
  const count = h('span.muted.small', { 'aria-live': 'polite', 'data-role': 'picked' });
  const bulk = (action) => guarded(async () => {
    const ids = [...selected].filter((id) => all.some((e) => e.id === id));
    if (!ids.length) return;
    const names = all.filter((e) => selected.has(e.id)).map((e) => e.name).join(', ');
    if (!await confirmDialog(t('envs.bulkTitle.' + action, { n: ids.length }), names,
      t('envs.bulk.' + action), action === 'delete')) return;
    await api('POST', '/envs/bulk', { action, ids });
    notify(t('envs.bulkDone', { n: ids.length }), 'ok');
    selected.clear();
    load();
  });
  const bulkBtns = ['enable', 'disable', 'delete'].map((a) => btn(t('envs.bulk.' + a), bulk(a),
    'small' + (a === 'delete' ? ' danger-ghost' : ''), { 'data-action': 'bulk-' + a }));
  const bar = h('div.actions.env-bar', search, count, bulkBtns);
  const list = h('div.card', loading());
  main.append(formBox, bar, list);
  const revealed = new Set();
  const selected = new Set();
  let all = [];
  const cols = [t('envs.pick'), t('tasks.col.name'), t('envs.value'), t('envs.remarks'), t('envs.state'),
    t('envs.updated'), t('tasks.col.actions')];
  const edit = (env) => envForm(formBox, env, load);
  const ctx = { cols, revealed, selected, edit, reload: () => load() };
  ctx.sync = () => {
    count.textContent = selected.size ? t('envs.picked', { n: selected.size }) : '';
    for (const b of bulkBtns) b.disabled = !selected.size;
  };
  const paint = () => {
    const needle = search.value.trim().toLowerCase();
    const shown = needle ? all.filter((e) => [e.name, e.remarks, e.value].some(
      (s) => (s || '').toLowerCase().includes(needle))) : all;
    const perName = new Map();
    for (const e of all) if (e.enabled) perName.set(e.name, (perName.get(e.name) || 0) + 1);
    const rows = shown.map((env) => envRows(env, ctx, all.indexOf(env), all.length,
      perName.get(env.name) || 0));
    fill(list, !all.length ? h('p.empty', t('envs.empty'))
      : !shown.length ? h('p.empty', t('envs.noMatch'))
        : grid(t('envs.title'), cols, rows, { class: 'env-grid' }));
    ctx.sync();
  };
  ctx.paint = (focusId) => {
    paint();
    const b = focusId && list.querySelector(`tr[data-env-id="${focusId}"] [data-action="reveal"]`);
    if (b) b.focus();
  };
  search.addEventListener('input', paint);

  async function load() {
    try {
      all = (await api('GET', '/envs')).items;
    } catch (e) {
      if (alive()) failBox(list, e);
      return;
    }
    if (!alive()) return;
    paint();
  }
  load();
}

export { viewEnvs };
