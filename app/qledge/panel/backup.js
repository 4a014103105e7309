/* qledge panel: System → Backup & restore (docs/backup.md). The download is a plain link
   (streamed by the browser, starts at once); a restore uploads the file as the body. */
import { t, h, fill, btn, api, guarded, confirmDialog, notify, fmtBytes, ApiError } from './core.js';

const MIN_PASSPHRASE = 8;  // backup/crypto.py's; the server refuses a shorter one too

// A refusal's code (BACKUP_*, RESTORE_*) in the panel's words, else the server's.
function said(e) {
  const key = 'bk.err.' + e.code;
  return t(key) === key ? e.message : t(key, (e.body && e.body.params) || {});
}

// With a passphrase the download is a form's POST (docs/backup.md, "Encryption"): the
// passphrase stays out of the URL, and the browser still streams the answer to disk.
function sealedDownload(pass, logs, hist) {
  const hidden = (name, value) => h('input', { type: 'hidden', name, value });
  const form = h('form', { method: 'post', action: '/api/v1/backup', hidden: true },
    hidden('passphrase', pass), logs && hidden('logs', '1'), hist && hidden('history', '1'));
  document.body.append(form);
  form.submit();
  setTimeout(() => form.remove(), 0);
}

function downloadPart() {
  const logs = h('input', { type: 'checkbox', id: 'bk-logs' });
  const hist = h('input', { type: 'checkbox', id: 'bk-history' });
  const size = h('p.small.muted', { id: 'bk-size' });
  const link = h('a', { class: 'btn primary', id: 'bk-download', download: '' }, t('bk.download'));
  const pass = h('input', { type: 'password', id: 'bk-enc-pass', autocomplete: 'new-password',
    'aria-describedby': 'bk-enc-help' });
  const help = h('p.help', { id: 'bk-enc-help' }, t('bk.encHelp'));
  const err = h('p.field-error', { id: 'bk-enc-error', role: 'alert', hidden: true });
  const update = () => {
    const p = new URLSearchParams();
    if (logs.checked) p.set('logs', '1');
    if (hist.checked) p.set('history', '1');
    link.href = '/api/v1/backup' + (p.toString() ? '?' + p : '');
    api('GET', '/backup/estimate' + (logs.checked ? '?logs=1' : '')).then((r) => {
      fill(size, t('bk.size', { parts: Object.entries(r.parts).map(([k, v]) =>
        `${t('bk.part.' + k)} ` + fmtBytes(v)).join(' · '), total: fmtBytes(r.total) }));
      if (r.encryption !== false) return;
      pass.disabled = true;
      fill(help, t('err.BACKUP_ENCRYPTION_UNAVAILABLE'));
    }, (e) => fill(size, e.message));
  };
  logs.addEventListener('change', update);
  hist.addEventListener('change', update);
  pass.addEventListener('input', () => {
    err.hidden = true;
    pass.removeAttribute('aria-invalid');
  });
  link.addEventListener('click', (e) => {
    if (!pass.value) return;  // the plain link
    e.preventDefault();
    if ([...pass.value].length < MIN_PASSPHRASE) {
      fill(err, t('err.BACKUP_PASSPHRASE_SHORT', { min: MIN_PASSPHRASE }));
      err.hidden = false;
      pass.setAttribute('aria-invalid', 'true');
      pass.focus();
      return;
    }
    sealedDownload(pass.value, logs.checked, hist.checked);
  });
  update();
  return [h('div', h('label', logs, ' ', t('bk.withLogs'))),
    h('div', h('label', hist, ' ', t('bk.withHistory'))),
    h('div.field', h('label', { for: 'bk-enc-pass' }, t('bk.encPass')), pass, err, help),
    size, link];
}

async function upload(file, pass) {
  const headers = { 'Content-Type': 'application/octet-stream' };
  // A header holds latin-1 only: the server percent-decodes it (never in the URL, which logs keep).
  if (pass) headers['Qledge-Backup-Passphrase'] = encodeURIComponent(pass);
  const res = await fetch('/api/v1/restore?replace=1', { method: 'POST', body: file,
    credentials: 'same-origin', headers });
  let data = null;
  try { data = await res.json(); } catch (e) { /* not JSON */ }
  if (!res.ok) throw new ApiError(res.status, data, res.statusText);
  return data;
}

function restorePart() {
  const file = h('input', { type: 'file', id: 'bk-file', accept: '.gz,.tgz,.tar,.enc' });
  const pass = h('input', { type: 'password', id: 'bk-pass', autocomplete: 'off' });
  const out = h('div', { id: 'bk-out', role: 'status' });
  const go = guarded(async () => {
    if (!await confirmDialog(t('bk.confirmTitle'), t('bk.confirm', { name: file.files[0].name }),
      t('bk.restore'), true)) return;
    fill(out, h('p.muted', t('bk.checking')));
    let r;
    try {
      r = await upload(file.files[0], pass.value);
    } catch (e) {
      fill(out, h('p.field-error', { id: 'bk-error', 'data-code': e.code || '' }, said(e)));
      return;
    }
    const text = t('bk.done', { ...r.counts, deps: Object.values(r.requeued).reduce(
      (a, b) => a + b, 0) });
    fill(out, h('p.on', { id: 'bk-result' }, text, ' ', t(r.logs ? 'bk.logsIn' : 'bk.logsKept'),
      r.restarting ? ' ' + t('bk.restarting') : ''));
    notify(text, 'ok');
    // The worker restarts to put the backup in place: reload once it answers again.
    let down = false;
    let tries = 0;
    const back = () => fetch('/readyz').then((x) => x.ok, () => false).then((ok) => {
      down = down || !ok;
      if (ok && (down || ++tries > 15)) location.reload(); else setTimeout(back, 1000);
    });
    if (r.restarting) setTimeout(back, 1000);
  });
  const start = btn(t('bk.restore'), go, 'danger', { 'data-action': 'bk-restore' });
  start.disabled = true;
  file.addEventListener('change', () => { start.disabled = !file.files.length; fill(out); });
  return [h('p.small.muted', t('bk.restoreHelp')), file,
    h('div', h('label', { for: 'bk-pass' }, t('bk.pass')), ' ', pass), start, out];
}

function backupCard() {
  return h('section.card', { id: 'sys-backup' }, h('h2', t('bk.title')),
    h('h3', t('bk.download')), downloadPart(), h('h3', t('bk.restore')), restorePart());
}

export { backupCard };
