/* qledge panel: the account (#/account): the password, the second factor (TOTP, with its
 * QR code and recovery codes), the browsers signed in and "sign out everywhere". */
import { t, h, fill, field, markField, unmark, api, btn, grid, row, heading, failBox, loading,
  fmtTime, notify, signIn, signOut, render, confirmDialog } from './core.js';
import { qrCanvas } from './qr.js';

const pw = (id, auto) => h('input', { id, type: 'password', autocomplete: auto || 'new-password' });

function passwordCard(state) {
  const cur = pw('acc-current', 'current-password');
  const next = pw('acc-new');
  const again = pw('acc-again');
  const top = h('p.field-error', { role: 'alert', hidden: true });
  const f = h('form', { novalidate: true },
    state.password_set ? field('acc-current', t('account.current'), cur,
      t('account.currentHelp'), 'current') : null,
    field('acc-new', t('account.new'), next, t('account.newHelp'), 'new'),
    field('acc-again', t('account.again'), again, null, 'again'), top,
    h('div.actions', h('button.btn.primary', { type: 'submit' },
      state.password_set ? t('account.change') : t('account.set'))));
  f.addEventListener('submit', async (e) => {
    e.preventDefault();
    unmark(f, top);
    if (next.value !== again.value) { markField(f, top, 'again', t('account.differ')).focus(); return; }
    const body = { new: next.value };
    if (state.password_set) body.current = cur.value;
    try {
      await api('POST', '/auth/password', body);
      signIn(false); // the header's offer is answered
      render();
      notify(t('account.saved'));
    } catch (ex) {
      const where = ex.code === 'CURRENT_PASSWORD_REQUIRED' ? 'current' : ex.field || null;
      const msg = ex.code === 'CURRENT_PASSWORD_REQUIRED' ? t('account.wrongCurrent')
        : ex.field === 'new' ? t('account.weak') : ex.message;
      markField(f, top, where, msg).focus();
    }
  });
  return h('section.card', { id: 'acc-password', 'aria-labelledby': 'acc-h1' },
    h('h2', { id: 'acc-h1' }, state.password_set ? t('account.password') : t('account.setTitle')),
    state.password_set ? null : h('p', t('account.setIntro')), f);
}

// The secret in groups of four, as authenticator apps show it.
const grouped = (secret) => secret.replace(/(.{4})/g, '$1 ').trim();

function totpCard(state, reload) {
  const body = h('div');
  const card = h('section.card', { id: 'acc-totp', 'aria-labelledby': 'acc-h2' },
    h('h2', { id: 'acc-h2' }, t('account.totp')), body);
  if (!state.password_set) {
    fill(body, h('p.muted', t('account.totpNeedsPassword')));
  } else if (state.totp_enabled) {
    fill(body, h('p', t('account.totpOn')), h('p.muted.small', t('account.totpReset')));
  } else {
    fill(body, h('p', t('account.totpIntro')),
      btn(t('account.totpStart'), () => begin(), 'primary', { 'data-action': 'totp-start' }));
  }
  async function begin() {
    let r;
    try { r = await api('POST', '/auth/totp'); } catch (ex) { notify(ex.message, 'error'); return; }
    const code = h('input', { id: 'acc-code', type: 'text', inputMode: 'numeric',
      autocomplete: 'one-time-code', maxLength: 6 });
    const top = h('p.field-error', { role: 'alert', hidden: true });
    const f = h('form', { novalidate: true },
      field('acc-code', t('signin.code'), code, t('account.totpConfirmHelp'), 'code'), top,
      h('div.actions', h('button.btn.primary', { type: 'submit' }, t('account.totpConfirm'))));
    f.addEventListener('submit', async (e) => {
      e.preventDefault();
      unmark(f, top);
      try {
        const done = await api('POST', '/auth/totp/confirm', { code: code.value.trim() });
        showCodes(done.recovery_codes);
      } catch (ex) {
        markField(f, top, 'code', ex.status === 401 ? t('account.totpWrong') : ex.message).focus();
      }
    });
    fill(body, h('p', t('account.totpScan')),
      h('div.qr', { role: 'img', 'aria-label': t('account.qrLabel') }, qrCanvas(r.uri, 232)),
      h('p.small', t('account.totpSecret')),
      h('p', h('code.wrap', { id: 'acc-secret' }, grouped(r.secret))), f);
    code.focus();
  }
  function showCodes(codes) {
    fill(body, h('p', t('account.totpOnNow')),
      h('div.alert.warn', { role: 'status' }, t('account.codesOnce')),
      h('ol.codes', { id: 'acc-codes' }, codes.map((c) => h('li', h('code', c)))),
      btn(t('account.codesDone'), () => reload(), 'primary', { 'data-action': 'codes-done' }));
  }
  return card;
}

function sessionsCard(items) {
  const cols = [t('account.browser'), t('account.client'), t('account.lastSeen'),
    t('account.method')];
  const everywhere = async () => {
    if (!await confirmDialog(t('account.everywhere'), t('account.everywhereConfirm'),
      t('account.everywhere'), true)) return;
    try { await api('POST', '/auth/logout-everywhere'); } catch (ex) { /* ended anyway */ }
    signOut();
  };
  return h('section.card', { id: 'acc-sessions', 'aria-labelledby': 'acc-h3' },
    h('h2', { id: 'acc-h3' }, t('account.sessions')),
    grid(t('account.sessions'), cols, items.map((s) => row(
      { 'data-current': s.current ? 'yes' : 'no' }, cols,
      [s.agent, s.current ? h('span.muted', ' ' + t('account.thisOne')) : null],
      s.client, fmtTime(s.last_seen_ms), t('signin.method.' + s.method))), { id: 'acc-list' }),
    h('div.actions', btn(t('account.everywhere'), everywhere, 'danger',
      { 'data-action': 'everywhere' })));
}

function viewAccount(main, alive) {
  heading(main, t('account.title'));
  const box = h('div.account', loading());
  main.append(box);
  async function load() {
    let state;
    let sessions;
    try {
      [state, sessions] = await Promise.all([api('GET', '/auth/state'),
        api('GET', '/auth/sessions')]);
    } catch (e) {
      if (alive()) failBox(box, e);
      return;
    }
    if (!alive()) return;
    fill(box, passwordCard(state), totpCard(state, load), sessionsCard(sessions.items));
  }
  load();
}

export { viewAccount };
