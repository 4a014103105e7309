/* qledge panel: dependencies (#/deps), docs/dependencies.md. A change is a run: its
 * page follows pip's or npm's output live. */
import { t, h, fill, rowBtn, actionsCell, field, markField, unmark, loading, grid, row, badge,
  guarded, apiPath, api, heading, failBox, refreshBtn } from './core.js';
const show = (runId) => { location.hash = '#/runs/' + runId; };

function viewDeps(main, alive) {
  const type = h('select', { id: 'd-type' }, h('option', 'python'), h('option', 'node'));
  const specs = h('textarea.mono', { id: 'd-specs', rows: 3, spellcheck: 'false' });
  const err = h('div.alert.error', { role: 'alert', hidden: true });
  const form = h('form.card.form', { novalidate: true }, err,
    field('d-type', t('subs.f.type'), type, null, 'type'),
    field('d-specs', t('deps.specs'), specs, t('deps.specsHelp'), 'specs'),
    h('div.actions', h('button.btn.primary', { type: 'submit' }, t('deps.install'))));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    unmark(form, err);
    try { // one per line: Python version lists hold commas, npm ranges spaces
      show((await api('POST', '/dependencies', { type: type.value,
        specs: specs.value.split('\n').map((s) => s.trim()).filter(Boolean) })).run_id);
    } catch (ex) {
      markField(form, err, (ex.field || '').replace(/\[\d+\]$/, ''), ex.message).focus();
    }
  });
  const list = h('div.card', loading());
  heading(main, t('nav.deps'), refreshBtn(load));
  main.append(form, list);
  const act = (key, d, path) => rowBtn(t(key), d.name, guarded(async () => {
    if (path) show((await api('POST', '/dependencies/' + path, { ids: [d.id] })).run_ids[0]);
    else await api('DELETE', apiPath('dependencies', d.id)).then(load); // it holds nothing
  }), path === 'reinstall' ? 'small' : 'small danger-ghost');
  async function load() {
    let items;
    try {
      items = (await api('GET', '/dependencies')).items;
    } catch (e) {
      if (alive()) failBox(list, e);
      return;
    }
    if (!alive()) return;
    const cols = [t('subs.f.type'), t('deps.package'), t('runs.status'),
      t('system.version'), t('tasks.col.actions')];
    fill(list, !items.length ? h('p.empty', t('deps.empty')) : grid(t('nav.deps'), cols,
      items.map((d) => row({ 'data-dep': d.name }, cols, d.type, h('code', d.spec),
        h('a', { href: '#/runs/' + d.last_run_id }, badge(d.status)),
        d.installed_version || '—',
        actionsCell(cols[4], act('deps.reinstall', d, 'reinstall'),
          ['removed', 'failed', 'cancelled', 'unknown'].includes(d.status)
            ? act('common.delete', d) : act('common.remove', d, 'remove'))))));
  }
  load();
}

export { viewDeps };
