/* qledge panel: env variables (#/envs). */
import { t, h, clear, fill, nextId, btn, rowBtn, actionsCell, field, markField, unmark, loading,
  grid, row, guarded, apiPath, notify, confirmDialog, api, heading, failBox } from './core.js';

function envForm(formBox, env, reload) {
  clear(formBox);
  const nameI = h('input.mono', { id: 'e-name', type: 'text', value: env ? env.name : '',
    autocomplete: 'off', spellcheck: 'false', required: true });
  const valueI = h('input.mono', { id: 'e-value', type: 'password', value: env ? env.value : '',
    autocomplete: 'off', spellcheck: 'false' });
  const show = h('input', { id: 'e-show', type: 'checkbox',
    onchange: () => { valueI.type = show.checked ? 'text' : 'password'; } });
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
    field('e-name', t('tasks.col.name'), nameI, t('envs.nameHelp'), 'name'),
    field('e-value', t('envs.value'), valueI, null, 'value'),
    h('div.field.check', show, h('label', { htmlFor: 'e-show' }, t('envs.show'))),
    field('e-remarks', t('envs.remarks'), remarksI, null, 'remarks'),
    h('div.field.check', enabledI,
      h('label', { htmlFor: 'e-enabled' }, t('tasks.col.enabled'))),
    h('div.actions', h('button.btn.primary', { type: 'submit' }, env ? t('common.save') : t('editor.envAdd')),
      btn(t('common.cancel'), () => clear(formBox), 'ghost')));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    unmark(form, formErr);
    const body = { name: nameI.value.trim(), value: valueI.value, remarks: remarksI.value,
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

// Values stay masked until revealed; `revealed` keeps that across reloads.
function envRow(env, cols, revealed, edit, reload) {
  const valueCell = h('td', { 'data-label': cols[1] });
  const paintValue = () => {
    const on = revealed.has(env.id);
    fill(valueCell,
      on ? h('code.wrap.env-val', env.value)
        : h('span.masked', { 'aria-label': t('envs.hidden') }, '••••••••'), ' ',
      btn(on ? t('envs.hide') : t('envs.reveal'), () => {
        if (revealed.has(env.id)) revealed.delete(env.id); else revealed.add(env.id);
        paintValue();
        valueCell.querySelector('button').focus();
      }, 'small ghost', { 'aria-pressed': on ? 'true' : 'false',
        'aria-label': (on ? t('envs.hide') : t('envs.reveal')) + ' ' + env.name }));
  };
  paintValue();
  return row({ 'data-env-name': env.name }, cols,
    h('code', env.name),
    valueCell,
    env.remarks || '—',
    h('span', { class: env.enabled ? 'on' : 'off' }, env.enabled ? t('envs.on') : t('envs.off')),
    actionsCell(cols[4],
      rowBtn(t('common.edit'), env.name, () => edit(env), 'small'),
      rowBtn(env.enabled ? t('tasks.disable') : t('tasks.enable'), env.name, guarded(async () => {
        await api('PUT', apiPath('envs', env.id), { enabled: !env.enabled });
        reload();
      }), 'small'),
      rowBtn(t('common.delete'), env.name, guarded(async () => {
        if (!await confirmDialog(t('envs.deleteTitle'), t('envs.deleteBody', { name: env.name }),
          t('common.delete'), true)) return;
        await api('DELETE', apiPath('envs', env.id));
        reload();
      }), 'small danger-ghost')));
}

function viewEnvs(main, alive) {
  heading(main, t('envs.title'),
    btn(t('envs.new'), () => edit(null), 'primary', { 'data-action': 'new-env' }));
  main.append(h('p.muted', t('envs.intro')));
  const formBox = h('div');
  const list = h('div.card', loading());
  main.append(formBox, list);
  const revealed = new Set();

  const edit = (env) => envForm(formBox, env, load);

  async function load() {
    let envs;
    try {
      envs = (await api('GET', '/envs')).items;
    } catch (e) {
      if (alive()) failBox(list, e);
      return;
    }
    if (!alive()) return;
    const cols = [t('tasks.col.name'), t('envs.value'), t('envs.remarks'), t('envs.state'),
      t('tasks.col.actions')];
    fill(list, !envs.length ? h('p.empty', t('envs.empty'))
      : grid(t('envs.title'), cols, envs.map((env) => envRow(env, cols, revealed, edit, load))));
  }
  load();
}

export { viewEnvs };
