/* qledge panel: System → Import from QingLong (docs/migrating-from-qinglong.md, issue 38).
 * Check (a dry run of the chosen backup), a choice per conflict (rename / replace / skip,
 * or the default for all), Apply after a confirmation that counts what will happen, then
 * what was done and what still needs the user. Every word from the report is said from
 * its codes (kinds, actions, `why`, `notes_coded`: i18n `imp.*`), never the server's
 * English. */
import { t, words, locale, h, fill, grid, row, btn, guarded, confirmDialog, notify, api }
  from './core.js';
import { errorText } from './errtext.js';

const lang = () => (locale().startsWith('zh') ? 'zh' : 'en');
const MODES = ['rename', 'replace', 'skip'];
// Skipped items the user finishes by hand (a channel to add, a subscription to re-create
// over HTTPS, a package for the image…): counted in the result and marked in the report.
const BY_HAND = new Set(['SSH_SUBSCRIPTION', 'NO_APPRISE_MAPPING', 'INCOMPLETE_CHANNEL',
  'UNMAPPED_SERVICE', 'SYSTEM_PACKAGE', 'QL_REPO', 'TIMEZONE', 'RANDOM_DELAY', 'NOT_VALID',
  'NEEDS_NODE', 'BAD_PACKAGE']);
const byHand = (i) => i.action === 'skip' && !!i.why && BY_HAND.has(i.why.code);

// One reason or note: its code's words, a nested code (`clash`) or field rule (`rule`)
// said in turn; a code the panel lacks is a generic sentence (never the English).
function said(coded) {
  if (!coded || !coded.code) return t('imp.why.unknown');
  const { clash, ...p } = coded.params || {};
  if (clash) p.clash = said({ code: clash, params: p });
  if (p.rule) p.rule = errorText({ rule: p.rule, field: p.field }, '', lang());
  // An app's scopes (apps/spec.py SCOPES): each in words; one QingLong has, qledge not, as is.
  if (p.scopes) p.scopes = p.scopes.split(', ').map((x) => words('imp.scope.', x))
    .join(lang() === 'zh' ? '、' : ', ');
  const key = 'imp.why.' + coded.code;
  return t(key) === key ? t('imp.why.unknown') : t(key, p);
}

function tally(r) {
  const n = { create: 0, change: 0, skip: 0, conflict: 0 };
  for (const per of Object.values(r.counts || {})) for (const a in n) n[a] += per[a] || 0;
  return n;
}

function choiceSelect(item, label, fallback) {
  const options = [['', t('imp.choice.none')], ...item.choices.map((m) => [m, t('imp.choice.' + m)])];
  return h('select', { 'data-choice': item.kind + ':' + item.key,
    'aria-label': t('imp.choiceFor', { label }) },
  options.map(([v, text]) => h('option', { value: v, selected: v === fallback || null }, text)));
}

function importCard() {
  const file = h('input', { type: 'file', accept: '.tgz', id: 'imp-file' });
  const out = h('div', { id: 'imp-out' });
  const all = h('select', { id: 'imp-default', 'aria-label': t('imp.defaultChoice') },
    ['', ...MODES].map((m) => h('option', { value: m }, t('imp.choice.' + (m || 'none')))));
  let selects = [];
  const cols = [t('system.kind'), t('system.outcome'), t('system.impItem'), t('imp.col.why')];
  const report = (r) => {
    selects = [];
    return grid(null, cols, r.items.map((i) => {
      const label = i.label_coded ? said(i.label_coded) : i.label;
      const pick = !r.applied && i.action === 'conflict' && (i.choices || []).length
        ? choiceSelect(i, label, all.value) : null;
      if (pick) selects.push([i, pick]);
      return row({ 'data-kind': i.kind, 'data-action': i.action,
        'data-by-hand': byHand(i) ? 'true' : null }, cols,
        words('imp.kind.', i.kind), words(r.applied ? 'imp.done.' : 'imp.action.', i.action),
        h('span.imp-label', label),
        [i.why ? said(i.why) : null, ...(i.notes_coded || []).map(said)].filter(Boolean)
          .join(lang() === 'zh' ? '；' : '; '), pick);
    }), { class: 'compact imp-report' });
  };
  // The choice each conflict row ends with: its own, else the default for all (when it
  // is one the item allows); '' leaves it undecided.
  const decided = () => {
    const choices = {};
    const n = { rename: 0, replace: 0, skip: 0, left: 0 };
    for (const [item, pick] of selects) {
      const mode = pick.value || (item.choices.includes(all.value) ? all.value : '');
      if (mode) { choices[item.kind + ':' + item.key] = mode; n[mode] += 1; } else n.left += 1;
    }
    return { choices, n };
  };
  all.addEventListener('change', () => {
    for (const [item, pick] of selects) if (item.choices.includes(all.value)) pick.value = all.value;
  });
  const send = guarded(async (apply, checked) => {
    const { choices, n } = decided();
    if (apply) {
      const what = [t('imp.confirm', tally(checked)), selects.length ? t('imp.confirmChoices', n) : '']
        .filter(Boolean).join(' ');
      if (!await confirmDialog(t('imp.confirmTitle'), what, t('system.impApply'))) return;
    }
    const body = new FormData();
    body.append('file', file.files[0]);
    if (apply && Object.keys(choices).length) body.append('choices', JSON.stringify(choices));
    const r = await api('POST', '/imports/qinglong?apply=' + apply, body);
    const deps = ((r.counts || {}).dependency || {}).create || 0;
    const left = tally(r).conflict;
    const hand = r.items.filter(byHand).length;
    const said1 = apply ? [t('imp.result', tally(r)), deps ? t('imp.deps', { n: deps }) : '',
      left ? t('imp.needsYou', { n: left }) : t('imp.allDone'),
      hand ? t('imp.byHand', { n: hand }) : ''].filter(Boolean).join(' ') : null;
    fill(out, said1 ? h('p', { id: 'imp-result', role: 'status', class: left ? 'warn-text' : 'on' },
      said1) : null,
    (r.notes_coded || []).length ? h('ul.small.muted', { id: 'imp-notes' },
      r.notes_coded.map((c) => h('li', said(c)))) : null,
    report(r),
    apply ? null : h('div.actions', selects.length ? h('label.small', t('imp.defaultChoice'), ' ', all)
      : null, btn(t('system.impApply'), () => send(true, r), 'primary', { 'data-action': 'imp-apply' })));
    if (said1) notify(said1, 'ok');
  });
  const check = btn(t('system.impCheck'), () => send(false), '', { 'data-action': 'imp-check' });
  check.disabled = true;
  file.addEventListener('change', () => { check.disabled = !file.files.length; fill(out); });
  return h('section.card', { id: 'sys-import' }, h('h2', t('system.import')), file, check, out);
}

export { importCard };
