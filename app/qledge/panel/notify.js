/* qledge panel: notifications (#/notify): channels with "send test", rules, deliveries. */
'use strict';
(() => {
  const { t, h, fill, btn, rowBtn, actionsCell, field, loading, grid, row, guarded, apiPath,
    notify, confirmDialog, api, heading, failBox, fmtTime, modal, refreshBtn } = window.QLEDGE;
  const STATUSES = ['failed', 'timed_out', 'lost', 'blocked', 'succeeded'];
  const STATE = { sent: 'succeeded', retrying: 'timed_out', pending: 'queued', given_up: 'failed' };

  // The URL is a secret: typed into a password field, sent once, never shown again.
  function newChannel(reload) {
    const nameI = h('input', { id: 'n-name', type: 'text', autocomplete: 'off', required: true });
    const urlI = h('input', { id: 'n-url', type: 'password', class: 'mono', autocomplete: 'off',
      spellcheck: 'false', required: true });
    const err = h('div', { class: 'alert error', role: 'alert', hidden: true });
    const m = modal(t('notify.newTitle'));
    const form = h('form', { class: 'form', novalidate: true }, err,
      field('n-name', t('envs.name'), nameI, null, 'name'),
      field('n-url', t('notify.url'), urlI, t('notify.urlHelp'), 'url'),
      h('div', { class: 'actions' },
        h('button', { type: 'submit', class: 'btn primary' }, t('common.save')),
        btn(t('common.cancel'), () => m.close(), 'ghost')));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      try {
        await api('POST', '/notifications/channels', { name: nameI.value.trim(), url: urlI.value });
        m.close();
        reload();
      } catch (ex) {
        err.textContent = ex.message; err.hidden = false;
      }
    });
    m.open(form);
    nameI.focus();
  }

  function channelRow(ch, cols, reload) {
    return row({ 'data-channel': ch.name }, cols, ch.name, h('code', null, ch.service),
      h('span', { class: ch.enabled ? 'on' : 'off' }, ch.enabled ? t('envs.on') : t('envs.off')),
      actionsCell(cols[3],
        rowBtn(t('notify.test'), ch.name, guarded(async () => {
          const r = await api('POST', apiPath('notifications', 'channels', ch.id, 'test'));
          notify(r.ok ? t('notify.testOk', { name: ch.name })
            : t('notify.testFail', { error: r.error }), r.ok ? 'ok' : 'error');
        }), 'small', { 'data-action': 'test' }),
        rowBtn(ch.enabled ? t('tasks.disable') : t('tasks.enable'), ch.name, guarded(async () => {
          await api('PATCH', apiPath('notifications', 'channels', ch.id), { enabled: !ch.enabled });
          reload();
        }), 'small'),
        rowBtn(t('common.delete'), ch.name, guarded(async () => {
          if (!await confirmDialog(t('notify.deleteTitle'), t('notify.deleteBody',
            { name: ch.name }), t('common.delete'), true)) return;
          await api('DELETE', apiPath('notifications', 'channels', ch.id));
          reload();
        }), 'small danger-ghost')));
  }

  function rulesForm(box, rules) {
    const check = (id, label, on) => {
      const el = h('input', { id, type: 'checkbox', checked: on });
      return [el, h('div', { class: 'field check' }, el, h('label', { htmlFor: id }, label))];
    };
    const num = (id, v, max) => h('input', { id, type: 'number', min: 0, max, value: v });
    const hhmm = (id, v) => h('input', { id, type: 'text', value: v || '', placeholder: 'HH:MM',
      class: 'mono', size: 6 });
    const boxes = STATUSES.map((s) => check('r-' + s, t('status.' + s), rules.statuses.includes(s)));
    const [recI, recF] = check('r-recovered', t('notify.recovered'), rules.recovered);
    const [diskI, diskF] = check('r-disk', t('notify.disk'), rules.disk_pressure);
    const streakI = num('r-streak', rules.streak, 100);
    const linesI = num('r-lines', rules.log_lines, 50);
    const qsI = hhmm('r-qs', rules.quiet_start);
    const qeI = hhmm('r-qe', rules.quiet_end);
    const err = h('div', { class: 'alert error', role: 'alert', hidden: true });
    const form = h('form', { class: 'form', novalidate: true, 'data-form': 'rules' },
      h('h2', null, t('notify.rules')), err,
      h('fieldset', null, h('legend', null, t('notify.on')), boxes.map((b) => b[1])),
      recF, diskF,
      field('r-streak', t('notify.streak'), streakI, t('notify.streakHelp'), 'streak'),
      field('r-lines', t('notify.lines'), linesI, t('notify.linesHelp'), 'log_lines'),
      field('r-qs', t('notify.quietStart'), qsI, null, 'quiet_start'),
      field('r-qe', t('notify.quietEnd'), qeI, t('notify.quietHelp'), 'quiet_end'),
      h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'btn primary' },
        t('common.save'))));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      err.hidden = true;
      const body = {
        statuses: STATUSES.filter((s, i) => boxes[i][0].checked), recovered: recI.checked,
        disk_pressure: diskI.checked, streak: Number(streakI.value) || 0,
        log_lines: Number(linesI.value) || 0, quiet_start: qsI.value.trim() || null,
        quiet_end: qeI.value.trim() || null,
      };
      try {
        await api('PUT', '/notifications/rules', body);
        notify(t('notify.saved'), 'ok');
      } catch (ex) {
        err.textContent = ex.message; err.hidden = false;
      }
    });
    fill(box, form);
  }

  function viewNotify(main, alive) {
    const chans = h('div', { class: 'card' }, loading());
    const rules = h('div', { class: 'card' }, loading());
    const sent = h('div', { class: 'card' }, loading());
    async function load() {
      let c; let r; let m;
      try {
        [c, r, m] = await Promise.all([api('GET', '/notifications/channels'),
          api('GET', '/notifications/rules'), api('GET', '/notifications/messages?limit=30')]);
      } catch (e) {
        if (alive()) failBox(chans, e);
        return;
      }
      if (!alive()) return;
      const cc = [t('envs.name'), t('notify.service'), t('envs.state'), t('tasks.col.actions')];
      fill(chans, h('h2', null, t('notify.channels')), !c.items.length
        ? h('p', { class: 'empty' }, t('notify.noChannels'))
        : grid(t('notify.channels'), cc, c.items.map((ch) => channelRow(ch, cc, load))));
      rulesForm(rules, r.global);
      const names = Object.fromEntries(c.items.map((ch) => [ch.id, ch.name]));
      const mc = [t('notify.when'), t('notify.msgTitle'), t('notify.channel'), t('notify.state'),
        t('notify.tries'), t('notify.error')];
      fill(sent, h('h2', null, t('notify.recent')), !m.items.length
        ? h('p', { class: 'empty' }, t('notify.noMessages'))
        : grid(t('notify.recent'), mc, m.items.map((x) => row({ 'data-state': x.state }, mc,
          fmtTime(x.created_at_ms), x.title, names[x.channel_id] || x.channel_id,
          h('span', { class: `badge badge-${STATE[x.state]}` }, t('notify.st.' + x.state)),
          String(x.tries), x.error || '—'))));
    }
    heading(main, t('notify.title'), refreshBtn(load),
      btn(t('notify.new'), () => newChannel(load), 'primary', { 'data-action': 'new-channel' }));
    main.append(h('p', { class: 'muted' }, t('notify.intro')), chans, rules, sent);
    load();
  }

  window.QLEDGE.pages.notify = viewNotify;
})();
