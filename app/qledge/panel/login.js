/* qledge panel: the sign-in page (shown whenever there is no token). */
'use strict';
(() => {
  const { t, h, api, render, signIn } = window.QLEDGE;

  function viewLogin(main) {
    document.title = `${t('login.title')} · qledge`;
    const input = h('input', { id: 'login-token', type: 'password', autocomplete: 'off',
      spellcheck: 'false', required: true, 'aria-describedby': 'login-token-help' });
    const err = h('p.field-error', { id: 'login-token-err', role: 'alert', hidden: true });
    const submit = h('button.btn.primary', { type: 'submit' }, t('login.submit'));
    // No `name` on the input and no GET: the token can never be serialised into a URL.
    const form = h('form.card.login', { method: 'post', novalidate: true },
      h('h1', { tabIndex: -1 }, t('login.title')),
      h('p', t('login.intro')),
      h('div.field', h('label', { htmlFor: 'login-token' }, t('login.token')), input,
        h('p.help', { id: 'login-token-help' }, t('login.help')), err),
      h('div.actions', submit));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const value = input.value.trim();
      err.hidden = true;
      input.removeAttribute('aria-invalid');
      if (!value) {
        err.textContent = t('login.empty'); err.hidden = false;
        input.setAttribute('aria-invalid', 'true'); input.focus();
        return;
      }
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
        err.textContent = ex.status === 401 ? t('login.refused') : ex.message;
        err.hidden = false;
        input.setAttribute('aria-invalid', 'true');
        input.focus();
      } finally {
        submit.disabled = false;
      }
    });
    main.append(form);
    input.focus();
  }

  window.QLEDGE.pages.login = viewLogin;
})();
