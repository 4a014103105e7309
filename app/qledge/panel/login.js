/* qledge panel: the sign-in page (shown whenever there is no token). */
import { t, h, field, markField, unmark, api, render, signIn } from './core.js';

function viewLogin(main) {
  document.title = `${t('login.title')} · qledge`;
  const input = h('input', { id: 'login-token', type: 'password', autocomplete: 'off',
    spellcheck: 'false', required: true });
  const tok = field('login-token', t('login.token'), input, t('login.help'), 'token');
  tok.lastChild.setAttribute('role', 'alert');
  const bad = (message) => markField(form, null, 'token', message).focus();
  const submit = h('button.btn.primary', { type: 'submit' }, t('login.title'));
  // No `name` on the input and no GET: the token can never be serialised into a URL.
  const form = h('form.card.login', { method: 'post', novalidate: true },
    h('h1', { tabIndex: -1 }, t('login.title')),
    h('p', t('login.intro')),
    tok,
    h('div.actions', submit));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const value = input.value.trim();
    unmark(form);
    if (!value) { bad(t('login.empty')); return; }
    submit.disabled = true;
    try {
      await api('GET', '/system', undefined, { token: value });
      signIn(value);
      input.value = '';
      if (!location.hash.startsWith('#/') || location.hash === '#/login') {
        location.hash = '#/tasks'; // hashchange renders
      } else {
        render();
      }
    } catch (ex) {
      bad(ex.status === 401 ? t('login.refused') : ex.message);
    } finally {
      submit.disabled = false;
    }
  });
  main.append(form);
  input.focus();
}

export { viewLogin };
