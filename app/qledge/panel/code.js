/* qledge panel: the code editor widget of the scripts page (docs/panel.md, "The code
 * editor"): a textarea over a highlighted copy of its text (text-only spans), a
 * line-number gutter, Tab/Shift-Tab indenting, and a find bar (Ctrl/⌘+F). */
import { t, h, nextId, btn } from './core.js';

// One regex per language; its groups, in order: comment, string, number, keyword.
const KW = {
  py: 'and|as|assert|async|await|break|class|continue|def|del|elif|else|except|False|finally|for|from|global|if|import|in|is|lambda|None|nonlocal|not|or|pass|raise|return|True|try|while|with|yield',
  js: 'async|await|break|case|catch|class|const|continue|default|delete|do|else|export|extends|false|finally|for|from|function|if|import|in|instanceof|let|new|null|of|return|static|super|switch|this|throw|true|try|typeof|undefined|var|void|while|yield',
  sh: 'case|do|done|elif|else|esac|exit|export|fi|for|function|if|in|local|return|set|then|until|while|echo|source',
};
const NUM = '\\b\\d[\\d_]*(?:\\.\\d+)?(?:[eE][+-]?\\d+)?\\b|\\b0[xX][\\da-fA-F]+\\b';
const RULES = {
  py: new RegExp(`(#.*)|("""[\\s\\S]*?(?:"""|$(?![\\s\\S]))|'''[\\s\\S]*?(?:'''|$(?![\\s\\S]))|"(?:\\\\.|[^"\\\\\\n])*"?|'(?:\\\\.|[^'\\\\\\n])*'?)|(${NUM})|\\b(${KW.py})\\b`, 'g'),
  js: new RegExp(`(\\/\\/.*|\\/\\*[\\s\\S]*?(?:\\*\\/|$(?![\\s\\S])))|(\`(?:\\\\[\\s\\S]|[^\`\\\\])*\`?|"(?:\\\\.|[^"\\\\\\n])*"?|'(?:\\\\.|[^'\\\\\\n])*'?)|(${NUM})|\\b(${KW.js})\\b`, 'g'),
  sh: new RegExp(`((?:^|(?<=\\s))#.*)|("(?:\\\\[\\s\\S]|[^"\\\\])*"?|'[^']*'?)|(${NUM})|\\b(${KW.sh})\\b`, 'gm'),
};
const CLS = ['c', 's', 'n', 'k'];
const MAX_HL = 256 * 1024; // a larger file is shown plain (a repaint per frame would lag)

// The language of a file by its name: 'py', 'js', 'sh' or null (plain text).
function langOf(path) {
  const ext = (path.match(/\.([a-z0-9]+)$/i) || [])[1]?.toLowerCase();
  if (ext === 'py') return 'py';
  if (['js', 'mjs', 'cjs', 'ts'].includes(ext)) return 'js';
  if (['sh', 'bash'].includes(ext)) return 'sh';
  return null;
}

// [start, end, class] for every token (pure: tests/panel/code.test.mjs).
function tokenize(text, lang) {
  const re = RULES[lang];
  const out = [];
  if (!re) return out;
  re.lastIndex = 0;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    if (!m[0]) { re.lastIndex += 1; continue; }
    const g = [1, 2, 3, 4].find((i) => m[i] !== undefined);
    out.push([m.index, m.index + m[0].length, CLS[g - 1]]);
  }
  return out;
}

// Every [start, end] of `needle` in `text`, case-insensitive (pure).
function findAll(text, needle) {
  const out = [];
  if (!needle) return out;
  const hay = text.toLowerCase();
  const n = needle.toLowerCase();
  for (let i = hay.indexOf(n); i >= 0; i = hay.indexOf(n, i + n.length)) out.push([i, i + n.length]);
  return out;
}

// The text as spans: tokens get their class, find matches a `mark` (the current one `.cur`).
function paintInto(pre, text, tokens, marks, cur) {
  const frag = document.createDocumentFragment();
  const cuts = new Set([0, text.length]);
  for (const [a, b] of tokens) { cuts.add(a); cuts.add(b); }
  for (const [a, b] of marks) { cuts.add(a); cuts.add(b); }
  const points = [...cuts].sort((x, y) => x - y);
  let ti = 0;
  let mi = 0;
  for (let i = 0; i < points.length - 1; i += 1) {
    const a = points[i];
    const b = points[i + 1];
    while (ti < tokens.length && tokens[ti][1] <= a) ti += 1;
    while (mi < marks.length && marks[mi][1] <= a) mi += 1;
    const tok = ti < tokens.length && tokens[ti][0] <= a ? tokens[ti][2] : null;
    const mark = mi < marks.length && marks[mi][0] <= a;
    const piece = text.slice(a, b);
    if (!tok && !mark) { frag.append(piece); continue; }
    const el = document.createElement(mark ? 'mark' : 'span');
    if (tok) el.className = 't-' + tok;
    if (mark && mi === cur) el.classList.add('cur');
    el.textContent = piece;
    frag.append(el);
  }
  frag.append('\n'); // a last empty line still takes its height
  pre.replaceChildren(frag);
}

// Indent (or with `out`, outdent) the lines the selection touches (pure): the new text
// and selection. A selection within one line, indenting, inserts `unit` at the caret.
function indent(text, start, end, unit, out) {
  const from = text.lastIndexOf('\n', start - 1) + 1;
  const multi = text.slice(start, end).includes('\n');
  if (!out && !multi) {
    return { text: text.slice(0, start) + unit + text.slice(end), start: start + unit.length,
      end: start + unit.length };
  }
  let to = end > start && text[end - 1] === '\n' ? end - 1 : end;
  const nl = text.indexOf('\n', to);
  to = nl < 0 ? text.length : nl;
  const lines = text.slice(from, to).split('\n');
  let first = 0;
  const done = lines.map((line, i) => {
    let d;
    if (!out) d = unit.length;
    else {
      const lead = line.match(/^(\t| {1,4})/);
      d = lead ? -lead[0].length : 0;
    }
    if (i === 0) first = d;
    return d >= 0 ? unit + line : line.slice(-d);
  }).join('\n');
  const caret = (p) => Math.max(from, p + first);
  return { text: text.slice(0, from) + done + text.slice(to),
    start: multi ? from : caret(start),
    end: multi ? from + done.length : caret(end) };
}

function codeEditor(label, text, path) {
  const id = nextId('code');
  const lang = langOf(path);
  const gutter = h('pre.gutter', { 'aria-hidden': 'true' });
  const hl = h('pre.hl', { 'aria-hidden': 'true', 'data-lang': lang || 'text' });
  const area = h('textarea.code', { id, wrap: 'off', spellcheck: 'false',
    autocomplete: 'off', autocapitalize: 'off', 'data-role': 'script-content',
    'aria-describedby': id + '-keys' });
  area.value = text;
  const unit = /^\t/m.test(text) && !/^ {2}/m.test(text) ? '\t' : '    ';
  const query = h('input', { type: 'search', id: id + '-q', 'data-role': 'find',
    autocomplete: 'off', spellcheck: 'false', 'aria-label': t('code.find') });
  const count = h('span.muted.small', { 'data-role': 'find-count', role: 'status' });
  let marks = [];
  let cur = -1;
  let lines = 0;
  let frame = 0;
  const paint = () => {
    frame = 0;
    const v = area.value;
    let n = 1;
    for (let i = v.indexOf('\n'); i >= 0; i = v.indexOf('\n', i + 1)) n += 1;
    if (n !== lines) {
      lines = n;
      gutter.textContent = Array.from({ length: n }, (_, i) => i + 1).join('\n');
    }
    marks = bar.hidden ? [] : findAll(v, query.value);
    if (cur >= marks.length) cur = marks.length - 1;
    count.textContent = bar.hidden || !query.value ? ''
      : t('code.count', { i: marks.length ? cur + 1 : 0, n: marks.length });
    paintInto(hl, v, v.length <= MAX_HL ? tokenize(v, lang) : [], marks, cur);
    sync();
  };
  const later = () => { if (!frame) frame = requestAnimationFrame(paint); };
  const sync = () => {
    gutter.scrollTop = area.scrollTop;
    hl.scrollTop = area.scrollTop;
    hl.scrollLeft = area.scrollLeft;
  };
  // Select match `i` in the textarea (focus stays in the find bar) and scroll it into view.
  const go = (step) => {
    paint();
    if (!marks.length) return;
    const caret = area.selectionEnd;
    if (cur < 0) cur = Math.max(0, marks.findIndex(([a]) => a >= caret));
    else cur = (cur + step + marks.length) % marks.length;
    const [a, b] = marks[cur];
    area.setSelectionRange(a, b);
    const line = area.value.slice(0, a).split('\n').length - 1;
    const lh = parseFloat(getComputedStyle(area).lineHeight) || 18;
    area.scrollTop = Math.max(0, line * lh - area.clientHeight / 2);
    paint();
  };
  const close = () => { bar.hidden = true; cur = -1; paint(); area.focus(); };
  const bar = h('div.find-bar', { hidden: true, role: 'search' },
    query, count,
    btn(t('code.prev'), () => go(-1), 'small ghost', { 'data-action': 'find-prev' }),
    btn(t('code.next'), () => go(1), 'small ghost', { 'data-action': 'find-next' }),
    btn(t('code.close'), close, 'small ghost', { 'data-action': 'find-close' }));
  query.addEventListener('input', () => { cur = -1; go(0); });
  query.addEventListener('keydown', (e) => {
    if (e.key === 'Enter') { e.preventDefault(); go(e.shiftKey ? -1 : 1); }
    if (e.key === 'Escape') { e.preventDefault(); close(); }
  });
  const openFind = () => {
    bar.hidden = false;
    const sel = area.value.slice(area.selectionStart, area.selectionEnd);
    if (sel && !sel.includes('\n')) query.value = sel;
    query.focus();
    query.select();
    cur = -1;
    go(0);
  };
  // Esc, then Tab: leave the editor (keyboard users); otherwise Tab indents.
  let escaped = false;
  area.addEventListener('keydown', (e) => {
    if ((e.ctrlKey || e.metaKey) && e.key.toLowerCase() === 'f') { e.preventDefault(); openFind(); return; }
    if (e.key === 'Escape') { escaped = true; return; }
    if (e.key !== 'Tab' || e.ctrlKey || e.altKey || e.metaKey || escaped) { escaped = false; return; }
    e.preventDefault();
    const r = indent(area.value, area.selectionStart, area.selectionEnd, unit, e.shiftKey);
    if (r.text === area.value) return;
    // Replace the changed stretch through the editing commands, so Undo undoes it.
    let a = 0;
    while (a < r.text.length && r.text[a] === area.value[a]) a += 1;
    let z = 0;
    while (z < r.text.length - a && z < area.value.length - a
      && r.text[r.text.length - 1 - z] === area.value[area.value.length - 1 - z]) z += 1;
    area.setSelectionRange(a, area.value.length - z);
    const piece = r.text.slice(a, r.text.length - z);
    if (!(piece ? document.execCommand('insertText', false, piece)
      : document.execCommand('delete'))) {
      area.setRangeText(piece);
      area.dispatchEvent(new Event('input', { bubbles: true }));
    }
    area.setSelectionRange(r.start, r.end);
  });
  area.addEventListener('input', later);
  area.addEventListener('scroll', sync);
  paint();
  const keys = h('p.help', { id: id + '-keys' }, t('code.keys'));
  return { area, openFind, el: h('div.code-editor', bar,
    h('div.code-wrap', h('label.sr-only', { htmlFor: id }, label), gutter,
      h('div.code-box', hl, area)), keys) };
}

export { codeEditor, tokenize, findAll, indent, langOf };
