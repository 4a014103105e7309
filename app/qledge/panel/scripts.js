/* qledge panel: the scripts folder (#/scripts, #/scripts/<path>; docs/panel.md). */
import { t, fmtTime, fmtBytes, h, clear, fill, nextId, btn, rowBtn, field, markField, unmark,
  loading, guarded, saveFile, notify, modal, confirmDialog, api, apiPath, q, onLeave,
  heading, failBox, badge, render } from './core.js';
import { beforeLeave } from './guard.js';
import { codeEditor } from './code.js';
import { logSection } from './log.js';
const opened = new Set(); // folders the user unfolded, kept across pages
let unsaved = null; // the path whose edits are not saved yet
const parentOf = (p) => (p.includes('/') ? p.slice(0, p.lastIndexOf('/')) : '');
const href = (p) => '#/scripts' + (p ? '/' + encodeURIComponent(p) : '');
const go = (p) => { if (location.hash === href(p)) render(); else location.hash = href(p); };
const under = (folder, name) => (folder ? folder + '/' + name : name);

/* A modal asking for one path; `submit(value)` does the work and may throw: its error
 * is shown in the dialog, which stays open until it succeeds or is cancelled. */
function askPath(title, value, okLabel, submit) {
  const input = h('input.mono', { id: nextId('ask'), type: 'text', value,
    autocomplete: 'off', spellcheck: 'false' });
  const wrap = field(input.id, t('scripts.pathLabel'), input, t('scripts.pathHelp'), 'path');
  wrap.lastChild.setAttribute('role', 'alert');
  const { dialog, close, open } = modal(title);
  const form = h('form', { method: 'dialog', novalidate: true },
    wrap,
    h('div.actions', btn(t('common.cancel'), close, 'ghost', { 'data-action': 'cancel' }),
      h('button.btn.primary', { type: 'submit', 'data-action': 'confirm' }, okLabel)));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    unmark(form);
    try {
      await submit(input.value.trim());
      close();
    } catch (ex) {
      markField(form, null, 'path', ex.message).focus();
    }
  });
  dialog.addEventListener('cancel', (e) => { e.preventDefault(); close(); });
  open(form);
  input.focus();
}

// ---- the tree
function treeList(nodes, selected) {
  return h('ul.tree', nodes.map((n) => {
    const current = n.path === selected ? 'page' : null;
    if (n.type === 'directory') {
      const open = opened.has(n.path) || selected.startsWith(n.path + '/') || n.path === selected;
      const det = h('details', { open, 'data-path': n.path },
        h('summary', h('a', { href: href(n.path), 'aria-current': current }, n.name + '/')),
        n.children ? treeList(n.children, selected)
          : h('p.muted.small', t('scripts.notListed')),
        n.truncated ? h('p.muted.small', t('scripts.truncated')) : null);
      det.addEventListener('toggle', () => {
        if (det.open) opened.add(n.path); else opened.delete(n.path);
      });
      return h('li', det);
    }
    if (n.type !== 'file') {
      return h('li.muted', n.name + ' ',
        h('span.small', t('scripts.notEditable', { kind: n.type })));
    }
    return h('li', h('a', { href: href(n.path), 'aria-current': current,
      'data-path': n.path }, n.name));
  }));
}

function find(nodes, path) {
  for (const n of nodes) {
    if (n.path === path) return n;
    if (n.children && path.startsWith(n.path + '/')) return find(n.children, path);
  }
  return null;
}

async function download(path, button) {
  button.disabled = true;
  try {
    const res = await api('GET', '/scripts/download' + q({ path }), undefined, { raw: true });
    saveFile(await res.blob(), path.split('/').pop());
  } catch (e) { notify(e.message, 'error'); } finally { button.disabled = false; }
}

const createTask = guarded(async (path) => {
  const meta = await api('GET', '/scripts/meta' + q({ path }));
  const prefill = new URLSearchParams({ name: meta.name, command: meta.command });
  if (meta.schedule) prefill.set('schedule', meta.schedule);
  location.hash = '#/tasks/new?' + prefill.toString();
});

function renameOrDelete(path, isDir) {
  return [
    btn(t('scripts.rename'), () => askPath(t('scripts.renameTitle'), path, t('scripts.rename'),
      async (to) => {
        await api('POST', '/scripts/move', { from: path, to });
        notify(t('scripts.renamed', { path: to }), 'ok');
        go(to);
      }), 'small', { 'data-action': 'rename' }),
    btn(t('common.delete'), guarded(async () => {
      if (!await confirmDialog(t('scripts.deleteTitle'),
        t(isDir ? 'scripts.deleteFolder' : 'scripts.deleteFile', { path }), t('common.delete'),
        true)) return;
      await api('DELETE', '/scripts' + q({ path }));
      notify(t('scripts.deleted', { path }), 'ok');
      go(parentOf(path));
    }), 'small danger-ghost', { 'data-action': 'delete' }),
  ];
}

function historyCard(path, reload) {
  const preview = h('pre.log.preview-version', { hidden: true, tabIndex: 0 });
  const list = h('div', loading());
  const card = h('section.card', { 'aria-label': t('scripts.historyTitle', { path }),
    'data-role': 'history' },
  h('h2', t('scripts.historyTitle', { path })), list, preview);
  api('GET', '/scripts/history' + q({ path })).then((res) => {
    fill(list, h('p.help', t('scripts.historyHelp', { n: res.keep })));
    if (!res.items.length) { list.append(h('p.empty', t('scripts.historyEmpty'))); return; }
    list.append(h('ol.versions', res.items.map((v) => h('li', { 'data-version': v.id },
      h('span', fmtTime(v.saved_at_ms)), h('span.muted.small', fmtBytes(v.size)),
      rowBtn(t('scripts.show'), fmtTime(v.saved_at_ms), guarded(async () => {
        const got = await api('GET', '/scripts/history/version' + q({ path, id: v.id }));
        preview.textContent = got.content;
        preview.hidden = false;
      }), 'small ghost'),
      rowBtn(t('scripts.restore'), fmtTime(v.saved_at_ms), guarded(async () => {
        if (!await confirmDialog(t('scripts.restoreTitle'),
          t('scripts.restoreBody', { path, when: fmtTime(v.saved_at_ms) }),
          t('scripts.restore'))) return;
        await api('POST', '/scripts/history/restore', { path, id: v.id });
        notify(t('scripts.restored', { path }), 'ok');
        reload();
      }), 'small', { 'data-action': 'restore' })))));
  }, (e) => failBox(list, e));
  return card;
}

function fileView(box, path, alive) {
  fill(box, loading());
  api('GET', '/scripts/file' + q({ path })).then((file) => {
    if (!alive()) return;
    let sha = file.sha256;
    unsaved = null;
    const status = h('p.muted.small', { 'aria-live': 'polite' },
      t('scripts.info', { size: fmtBytes(file.size), when: fmtTime(file.mtime_ms) }));
    const ed = codeEditor(t('scripts.content', { path }), file.content, path);
    const err = h('div.alert.error', { role: 'alert', hidden: true });
    const histBox = h('div');
    const save = async () => {
      err.hidden = true;
      try {
        const res = await api('PUT', '/scripts/file', { path, content: ed.area.value,
          base_sha256: sha });
        sha = res.sha256;
        ed.area.dataset.dirty = '';
        unsaved = null;
        status.textContent = t('scripts.saved', { size: fmtBytes(res.size) });
        notify(t('scripts.saved', { size: fmtBytes(res.size) }), 'ok');
        if (!histBox.hidden && histBox.firstChild) fill(histBox, historyCard(path, reload));
        return true;
      } catch (e) { err.textContent = e.message; err.hidden = false; }
    };
    // Run what the editor shows (unsaved edits saved first); its log opens beside it.
    const runBox = h('section.card.debug-run', { hidden: true, 'data-role': 'debug-run',
      'aria-label': t('scripts.debugTitle') });
    const runBtn = btn(t('runs.col.run'), guarded(async () => {
      runBtn.disabled = true;
      try {
        if (ed.area.dataset.dirty && !(await save())) return;
        debugRun(runBox, (await api('POST', '/scripts/run', { path })).run.id, alive);
      } finally { runBtn.disabled = false; }
    }), 'small', { 'data-action': 'run' });
    const reload = () => fileView(box, path, alive);
    ed.area.addEventListener('input', () => {
      if (!ed.area.dataset.dirty) { ed.area.dataset.dirty = '1'; status.textContent = t('scripts.unsaved'); }
      unsaved = path;
    });
    ed.area.addEventListener('keydown', (e) => {
      if ((e.ctrlKey || e.metaKey) && e.key === 's') { e.preventDefault(); save(); }
    });
    const histBtn = btn(t('scripts.history'), () => {
      const show = !histBox.firstChild;
      if (show) fill(histBox, historyCard(path, reload)); else clear(histBox);
      histBtn.setAttribute('aria-expanded', String(show));
    }, 'small', { 'data-action': 'history', 'aria-expanded': 'false' });
    const dl = btn(t('log.download'), () => download(path, dl), 'small ghost');
    fill(box,
      h('section.card', { 'data-role': 'editor' },
        h('div.section-head', h('h2', h('code', path))),
        status, err,
        h('div.actions.toolbar', btn(t('common.save'), save, 'primary', { 'data-action': 'save' }), runBtn,
          btn(t('scripts.createTask'), () => createTask(path), 'small', { 'data-action': 'create-task' }),
          btn(t('code.findBtn'), ed.openFind, 'small', { 'data-action': 'find' }),
          histBtn, dl, renameOrDelete(path, false)),
        h('div.editor-split', ed.el, runBox)),
      histBox);
  }, (e) => {
    if (!alive()) return;
    if (e.code === 'SCRIPT_WRONG_TYPE' && e.body.reason === 'is_directory') {
      folderView(box, path, alive);
      return;
    }
    failBox(box, e);
  });
}

function folderView(box, path, alive) {
  fill(box, loading());
  api('GET', '/scripts' + q({ path, depth: 1 })).then((res) => {
    if (!alive()) return;
    fill(box, h('section.card', { 'data-role': 'folder' },
      h('div.section-head', h('h2', h('code', path + '/'))),
      h('div.actions.toolbar', renameOrDelete(path, true)),
      res.items.length ? treeList(res.items, '') : h('p.empty', t('scripts.folderEmpty'))));
  }, (e) => { if (alive()) failBox(box, e); });
}

function uploadInto(folder, limits) {
  const input = h('input', { type: 'file', hidden: true });
  input.addEventListener('change', async () => {
    const file = input.files[0];
    input.remove();
    if (!file) return;
    if (limits && file.size > limits.max_upload) {
      notify(t('scripts.tooLarge', { name: file.name, max: fmtBytes(limits.max_upload) }), 'error');
      return;
    }
    const send = async (overwrite) => {
      const form = new FormData();
      form.append('file', file, file.name);
      return api('POST', '/scripts/upload' + q({ path: folder, overwrite: overwrite ? 1 : null }), form);
    };
    try {
      let res;
      try {
        res = await send(false);
      } catch (e) {
        if (e.code !== 'SCRIPT_EXISTS') throw e;
        const ok = await confirmDialog(t('scripts.existsTitle'),
          t('scripts.existsBody', { path: under(folder, file.name) }), t('scripts.overwrite'), true);
        if (!ok) return;
        res = await send(true);
      }
      notify(t('scripts.uploaded', { path: res.path }), 'ok');
      go(res.path);
    } catch (e) { notify(e.message, 'error'); }
  });
  document.body.append(input);
  input.click();
}

// A debug run beside the editor: its status, Cancel and the live log (log.js).
let debugGen = 0;
function debugRun(box, runId, alive) {
  const gen = ++debugGen;
  const live = () => alive() && gen === debugGen && box.isConnected;
  const state = h('span', { 'data-role': 'debug-status' });
  const log = logSection(runId);
  const cancel = btn(t('run.cancel'), guarded(async () => {
    cancel.disabled = true;
    try { await api('POST', apiPath('runs', runId, 'cancel')); } finally { cancel.disabled = false; }
    poll();
  }), 'small danger-ghost', { 'data-action': 'cancel-debug' });
  const close = btn(t('code.close'), () => { debugGen += 1; box.hidden = true; clear(box); },
    'small ghost', { 'data-action': 'close-debug' });
  let timer = 0;
  const poll = async () => {
    clearTimeout(timer);
    if (!live()) return;
    try {
      const r = await api('GET', apiPath('runs', runId));
      if (!live()) return;
      fill(state, badge(r.status), r.exit_code != null ? ' ' + t('runs.exit', { code: r.exit_code }) : null);
      cancel.hidden = r.terminal;
      if (r.terminal) return;
    } catch (e) { /* the log still says what it can; try again */ }
    timer = setTimeout(poll, 1500);
  };
  box.dataset.runId = runId;
  fill(box, h('div.section-head', h('h2', t('scripts.debugTitle')), state,
    h('div.actions', cancel, close, h('a.small', { href: '#/runs/' + runId }, t('scripts.openRun')))),
  h('p.muted.small', t('scripts.debugHelp')), log.el);
  box.hidden = false;
  log.start(live, () => poll());
  poll();
  onLeave(() => clearTimeout(timer));
}

function viewScripts(main, path, alive) {
  let limits = null;
  let folder = '';
  // New file / new folder: ask for the path (in the folder shown), create it, open it.
  const create = (key, make, cls, action) => btn(t(key), () => askPath(t(key),
    folder ? folder + '/' : '', t('scripts.create'), async (p) => {
      await make(p);
      notify(t('scripts.created', { path: p }), 'ok');
      go(p);
    }), cls, { 'data-action': action });
  heading(main, t('nav.scripts'),
    create('scripts.newFile', (p) => api('PUT', '/scripts/file', { path: p, content: '',
      create: true }), 'primary', 'new-file'),
    create('scripts.newFolder', (p) => api('POST', '/scripts/folder', { path: p }), '',
      'new-folder'),
    btn(t('scripts.upload'), () => uploadInto(folder, limits), '', { 'data-action': 'upload' }));
  main.append(h('p.muted', t('scripts.intro')));
  const treeBody = h('div', { id: 'tree-body' }, loading());
  // Phones show the editor first and the tree in a drawer (folded while a file is open).
  const fold = btn(t('scripts.files'), () => {
    const open = fold.getAttribute('aria-expanded') !== 'true';
    fold.setAttribute('aria-expanded', String(open));
    nav.classList.toggle('folded', !open);
  }, 'small ghost tree-toggle', { 'aria-expanded': String(!path), 'aria-controls': 'tree-body',
    'data-action': 'tree-toggle' });
  const nav = h('nav.card.tree-card', { 'aria-label': t('scripts.treeLabel'),
    class: path ? 'folded' : null }, fold, treeBody);
  const box = h('div.script-main');
  main.append(h('div.scripts-grid', nav, box));

  api('GET', '/scripts').then((res) => {
    if (!alive()) return;
    limits = res.limits;
    const node = path ? find(res.items, path) : null;
    folder = node && node.type === 'directory' ? path : parentOf(path);
    fill(treeBody, h('a.plain.strong', { href: href(''),
      'aria-current': path ? null : 'page' }, t('scripts.root')),
    res.items.length ? treeList(res.items, path) : h('p.empty', t('scripts.empty')),
    res.truncated ? h('p.muted.small', t('scripts.truncated')) : null);
  }, (e) => { if (alive()) failBox(treeBody, e); });

  if (!path) fill(box, h('div.card', h('p.muted', t('scripts.pick'))));
  else fileView(box, path, alive);
  // Leaving by any route change (tree, top navigation, a link) with unsaved edits asks
  // first (the router's beforeLeave); so does closing the tab.
  beforeLeave(async () => {
    if (!unsaved) return true;
    const ok = await confirmDialog(t('scripts.leaveTitle'), t('scripts.leaveBody', { path: unsaved }),
      t('scripts.leave'), true);
    if (ok) unsaved = null;
    return ok;
  });
  const guard = (e) => { if (unsaved) { e.preventDefault(); e.returnValue = ''; } };
  addEventListener('beforeunload', guard);
  onLeave(() => {
    unsaved = null;
    removeEventListener('beforeunload', guard);
    for (const d of document.querySelectorAll('dialog.dialog')) d.remove();
  });
}

export { viewScripts };
