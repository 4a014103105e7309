/* qledge panel: the sign-in page: the password (and a TOTP or recovery code when the
 * second factor is on), or the admin token — always accepted, the way back in. A session
 * cookie (HttpOnly) is what the browser keeps; this page stores nothing. */
import { t, h, field, markField, unmark, api, render, signIn, btn, clear } from './core.js';

function input(id, type, extra) {
  return h('input', { id, type, autocomplete: 'off', spellcheck: 'false', ...(extra || {}) });
}

// After signing in: the page the address names (a link from a notification), else the
// overview (which shows the first-hour page while there are no tasks).
// With no password yet, the header's Account link reads "Set a password" (the offer).
function land(state) {
  signIn(!state.password_set);
  if (!location.hash.startsWith('#/') || location.hash === '#/login') location.hash = '#/overview';
  render();
}

function viewLogin(main) {
  document.title = `${t('login.title')} · qledge`;
  const box = h('div.login-box');
  main.append(box);
  api('GET', '/auth/state', undefined, { signin: true })
    .then((state) => {
      if (state.signed_in && location.hash !== '#/login') { land(state); return; }
      form(box, state, !state.password_set);
    },
      () => form(box, { password_set: false }, true));
}

function form(box, state, byToken) {
  clear(box);
  const pass = input('login-password', 'password', { autocomplete: 'current-password' });
  const code = input('login-code', 'text', { inputMode: 'numeric', autocomplete: 'one-time-code',
    maxLength: 11 });
  const tokenIn = input('login-token', 'password');
  const codeField = field('login-code', t('signin.code'), code, t('signin.codeHelp'), 'code');
  codeField.hidden = !state.totp_enabled;
  const fields = byToken
    ? [field('login-token', t('login.token'), tokenIn, t('login.help'), 'token')]
    : [field('login-password', t('signin.password'), pass, null, 'password'), codeField];
  const top = h('p.field-error', { role: 'alert', hidden: true });
  const submit = h('button.btn.primary', { type: 'submit' }, t('login.title'));
  const other = state.password_set
    ? btn(byToken ? t('signin.usePassword') : t('signin.useToken'),
      () => form(box, state, !byToken), 'ghost small', { 'data-action': 'switch' })
    : null;
  // No `name` on the inputs and no GET: nothing can be serialised into a URL.
  const f = h('form.card.login', { method: 'post', novalidate: true },
    h('h1', { tabIndex: -1 }, t('login.title')),
    h('p', byToken ? t(state.password_set ? 'signin.tokenIntro' : 'login.intro')
      : t('signin.intro')),
    ...fields, top, h('div.actions', submit, other));
  f.addEventListener('submit', async (e) => {
    e.preventDefault();
    unmark(f, top);
    const body = byToken ? { token: tokenIn.value.trim() } : { password: pass.value };
    if (!byToken && code.value.trim()) body.code = code.value.trim();
    const which = byToken ? 'token' : 'password';
    if (!(body.token || body.password)) {
      markField(f, top, which, t(byToken ? 'login.empty' : 'signin.empty')).focus();
      return;
    }
    submit.disabled = true;
    try {
      const r = await api('POST', '/auth/login', body, { signin: true });
      tokenIn.value = ''; pass.value = ''; code.value = '';
      land(r);
    } catch (ex) {
      if (ex.code === 'TOTP_REQUIRED') {
        codeField.hidden = false;
        markField(f, top, 'code', t('signin.needCode')).focus();
      } else if (ex.code === 'SIGNIN_THROTTLED' || ex.status === 429) {
        markField(f, top, null, t('signin.throttled', { n: ex.body.retry_after_s || '?' })).focus();
      } else if (ex.status === 401) {
        const wrong = byToken ? t('login.refused')
          : body.code ? t('signin.refusedCode') : t('signin.refused');
        markField(f, top, body.code ? 'code' : which, wrong).focus();
      } else {
        markField(f, top, null, ex.message).focus();
      }
    } finally {
      submit.disabled = false;
    }
  });
  box.append(f);
  (byToken ? tokenIn : pass).focus();
}

export { viewLogin };
