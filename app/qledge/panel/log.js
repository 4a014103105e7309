/* qledge panel: the live log of a run and its download (run.js shows the section). */

import { t, words, statusLabel, fmtTime, h, fill, btn, apiPath, saveFile, notify, api, q, onLeave } from './core.js';
const LOG_KEEP = 2000000; // characters of log kept on the page (the download has it all)

/* ANSI colours of a log (issue #37). `ansiParser()` returns feed(text) → pieces
 * [{ text, cls }] where cls lists CSS classes (ansi-fg-31, ansi-bg-42, ansi-bold):
 * SGR 0 (reset), 1/22 (bold), 30–37/90–97/39 (colour), 40–47/100–107/49 (background)
 * are kept; every other escape sequence (cursor moves, OSC titles, other SGR) is
 * dropped. A sequence cut by a chunk boundary waits for the next chunk (at most 64
 * characters of it; longer, it is not an escape sequence and is dropped). */
const ESCAPE = /\x1b(?:\[([0-?]*)[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[ -/]*[0-Z\\^-~])/g;
const PARTIAL = /\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*\x1b?|[ -/]*)$/;

function ansiParser() {
  let fg = null;
  let bg = null;
  let bold = false;
  let held = '';
  const classes = () => [fg && `ansi-fg-${fg}`, bg && `ansi-bg-${bg}`, bold && 'ansi-bold']
    .filter(Boolean);
  function sgr(params) {
    const codes = params === '' ? [0] : params.split(';').map((p) => Number(p || 0));
    for (const c of codes) {
      if (c === 0) { fg = null; bg = null; bold = false; }
      else if (c === 1) bold = true;
      else if (c === 22) bold = false;
      else if ((c >= 30 && c <= 37) || (c >= 90 && c <= 97)) fg = c;
      else if (c === 39) fg = null;
      else if ((c >= 40 && c <= 47) || (c >= 100 && c <= 107)) bg = c;
      else if (c === 49) bg = null;
    }
  }
  return function feed(chunk) {
    let text = held + chunk;
    held = '';
    const cut = PARTIAL.exec(text);
    if (cut && cut[0].length <= 64) {
      held = cut[0];
      text = text.slice(0, cut.index);
    } else if (cut) {
      text = text.slice(0, cut.index);
    }
    const out = [];
    let at = 0;
    const push = (piece) => { if (piece) out.push({ text: piece, cls: classes() }); };
    for (const m of text.matchAll(ESCAPE)) {
      push(text.slice(at, m.index));
      at = m.index + m[0].length;
      if (m[0].startsWith('\x1b[') && m[0].endsWith('m') && /^[0-9;]*$/.test(m[1])) sgr(m[1]);
    }
    push(text.slice(at));
    return out;
  };
}

/* Search in the log (case-insensitive; matches marked with the CSS Custom Highlight API,
 * so the log's DOM is not touched; next/previous scroll to a match, n of m counted) and
 * a wrap toggle remembered in localStorage. */
const WRAP_KEY = 'qledge.log.wrap';
function logTools(pre) {
  const find = h('input', { type: 'search', id: 'log-find', autocomplete: 'off',
    placeholder: t('log.find'), 'aria-label': t('log.find') });
  const count = h('span.muted.small', { id: 'log-find-count', 'aria-live': 'polite' });
  let ranges = [];
  let at = -1;
  const mark = (name, list) => {
    if (typeof Highlight === 'function' && window.CSS && CSS.highlights) {
      if (list.length) CSS.highlights.set(name, new Highlight(...list));
      else CSS.highlights.delete(name);
    }
  };
  function search() {
    const needle = find.value.toLowerCase();
    ranges = [];
    at = -1;
    if (needle) {
      const nodes = [];
      const walk = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
      let all = '';
      for (let n = walk.nextNode(); n; n = walk.nextNode()) {
        nodes.push([n, all.length]);
        all += n.data;
      }
      const hay = all.toLowerCase();
      const locate = (pos) => {
        let i = nodes.length - 1;
        while (i > 0 && nodes[i][1] > pos) i -= 1;
        return [nodes[i][0], pos - nodes[i][1]];
      };
      for (let i = hay.indexOf(needle); i >= 0 && ranges.length < 10000;
        i = hay.indexOf(needle, i + needle.length)) {
        const r = document.createRange();
        r.setStart(...locate(i));
        r.setEnd(...locate(i + needle.length - 1));
        r.setEnd(r.endContainer, r.endOffset + 1);
        ranges.push(r);
      }
    }
    mark('log-match', ranges);
    step(1);
  }
  function step(by) {
    if (ranges.length) at = (at + by + ranges.length) % ranges.length;
    mark('log-current', ranges.length ? [ranges[at]] : []);
    count.textContent = find.value ? t('log.found', { n: ranges.length ? at + 1 : 0,
      m: ranges.length }) : '';
    count.dataset.count = String(ranges.length);
    if (ranges.length) {
      const box = ranges[at].getBoundingClientRect();
      const view = pre.getBoundingClientRect();
      pre.scrollTop += box.top - view.top - pre.clientHeight / 2;
    }
  }
  find.addEventListener('input', search);
  find.addEventListener('keydown', (e) => {
    if (e.key === 'Enter') { e.preventDefault(); step(e.shiftKey ? -1 : 1); }
  });
  const wrap = h('input', { type: 'checkbox', id: 'log-wrap',
    checked: localStorage.getItem(WRAP_KEY) !== 'off' });
  const applyWrap = () => { pre.classList.toggle('nowrap', !wrap.checked); };
  wrap.addEventListener('change', () => {
    localStorage.setItem(WRAP_KEY, wrap.checked ? 'on' : 'off');
    applyWrap();
  });
  applyWrap();
  return h('div.log-tools', find,
    btn(t('log.prev'), () => step(-1), 'small ghost', { 'data-action': 'find-prev' }),
    btn(t('log.next'), () => step(1), 'small ghost', { 'data-action': 'find-next' }),
    count,
    h('label.small', { htmlFor: 'log-wrap' }, wrap, ' ' + t('log.wrap')));
}

// A parsed piece as DOM: a text node, or a span with its colour classes (text only).
function pieceNode(piece) {
  if (!piece.cls.length) return document.createTextNode(piece.text);
  const span = document.createElement('span');
  span.className = piece.cls.join(' ');
  span.textContent = piece.text;
  return span;
}

// `start` follows the stream until it ends (then onEnd) or the page is left.
function logSection(runId) {
  const stateEl = h('span.log-state', { id: 'log-state', 'data-state': 'connecting' },
    t('log.connecting'));
  const pre = h('pre.log', { id: 'log', role: 'log', tabIndex: 0,
    'aria-labelledby': 'log-h', 'aria-live': 'off' });
  const trimmed = h('p.muted.small', { hidden: true }, t('log.trimmed'));
  const problem = h('div.alert.error', { id: 'log-problem', role: 'alert',
    hidden: true });
  const note = h('p.alert.warn', { id: 'log-note', hidden: true });
  const download = btn(t('log.download'), () => downloadLog(runId, download, problem),
    'small ghost', { 'data-action': 'download' });
  const el = h('section.card', { id: 'log-section', 'data-reconnects': '0' },
    h('div.section-head', h('h2', { id: 'log-h' }, t('log.title')), stateEl,
      download),
    logTools(pre), problem, note, trimmed, pre);
  const truncated = (on, size, expected) => {
    note.textContent = on ? t('log.truncated', { n: size, m: expected }) : '';
    note.hidden = !on;
  };
  return { el, truncated,
    start: (alive, onEnd) => follow(runId, pre, stateEl, el, trimmed, problem, truncated,
      alive, onEnd) };
}

// Fleet mode: the log is on a node that does not answer (docs/fleet.md).
const downText = (d) => t('log.nodeDown', { node: d.node, time: fmtTime(d.last_seen_ms) });

// A log the API cannot read (docs/api.md): words for the code, the API's message under them.
function showProblem(box, code, kind, message, from) {
  const kindKey = 'kind.' + kind;
  const key = 'log.err.' + code;
  let text = t(key, { kind: t(kindKey) === kindKey ? kind || '?' : t(kindKey) });
  if (text === key) text = message || code;
  fill(box, h('p', text), message && message !== text
    ? h('p.small', { 'data-role': 'api-message' }, message) : null);
  box.dataset.error = code;
  box.dataset.from = from;
  box.hidden = false;
}

/* The live log. EventSource would reconnect on its own, but with the same URL —
 * whose ticket is already spent — so errors are handled here: close, back off, get a
 * new ticket and reopen from the last offset we hold (the `id` of the last `log`
 * event = the next byte offset), so nothing is shown twice or skipped. */
function follow(runId, pre, stateEl, section, trimmedNote, problem, truncated, alive, onEnd) {
  let offset = 0;
  let es = null;
  let done = false;
  let retry = 0;
  let timer = 0;
  let reconnects = 0;
  let kept = 0;
  const setState = (state, text) => { stateEl.dataset.state = state; stateEl.textContent = text; };
  const stop = () => { done = true; clearTimeout(timer); if (es) { es.close(); es = null; } };
  onLeave(stop);

  const colours = ansiParser();
  function appendText(text) {
    const stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 24;
    for (const piece of colours(text)) {
      pre.append(pieceNode(piece));
      kept += piece.text.length;
    }
    if (kept > LOG_KEEP) {
      // whole pieces go from the top, so the colours of what stays are kept
      while (pre.firstChild && kept > LOG_KEEP / 2) {
        kept -= pre.firstChild.textContent.length;
        pre.firstChild.remove();
      }
      trimmedNote.hidden = false;
    }
    if (stick) pre.scrollTop = pre.scrollHeight;
  }

  function again() {
    if (done || !alive()) return;
    const delay = Math.min(5000, 250 * 2 ** retry) * (0.8 + Math.random() * 0.4);
    retry += 1;
    setState('reconnecting', t('log.reconnecting'));
    timer = setTimeout(open, delay);
  }

  async function open() {
    if (done || !alive()) return;
    let ticket;
    try {
      ticket = await api('POST', apiPath('runs', runId, 'log', 'ticket'));
    } catch (e) {
      if (e.status === 404) { setState('gone', t('log.gone')); done = true; return; }
      if (e.status === 401) return; // signed out
      again();
      return;
    }
    if (done || !alive()) return;
    const source = new EventSource('/api/v1' + apiPath('runs', runId, 'log', 'stream') +
      q({ offset, ticket: ticket.ticket }));
    es = source;
    source.addEventListener('open', () => {
      retry = 0;
      setState('live', t('log.live'));
    });
    source.addEventListener('log', (ev) => {
      const next = Number(ev.lastEventId);
      if (!(next > offset)) return; // never show a byte range twice
      appendText(JSON.parse(ev.data).text);
      offset = next;
      pre.dataset.offset = String(offset);
    });
    source.addEventListener('evicted', (ev) => {
      // retention deleted the log file; the run itself is kept (docs/retention.md)
      const info = JSON.parse(ev.data);
      trimmedNote.textContent = t('log.evicted', { reason: words('evict.', info.reason || '') });
      trimmedNote.hidden = false;
      section.dataset.evicted = 'true';
    });
    source.addEventListener('node_down', (ev) => {
      // fleet mode: the log is on another node that does not answer; reconnecting
      // now would only say the same (docs/fleet.md)
      source.close();
      es = null;
      done = true;
      setState('error', downText(JSON.parse(ev.data)));
    });
    source.addEventListener('end', (ev) => {
      source.close();
      es = null;
      done = true;
      const end = JSON.parse(ev.data);
      if (end.error) {
        // the log cannot be read (a FIFO in its place, a stuck filesystem): reconnecting
        // would only end the same way, so the stream stays closed (docs/api.md)
        setState('error', t('log.stopped', { status: statusLabel(end.status) }));
        showProblem(problem, end.error, end.kind, end.message, 'stream');
      } else {
        // shorter than at exit: a power loss took the tail (null: unknown right now)
        const cut = end.log_truncated === true;
        setState('ended', t(cut ? 'log.endedCut' : 'log.ended',
          { status: statusLabel(end.status) }));
        if (cut) truncated(true, offset, end.log_bytes_at_exit);
      }
      onEnd(end);
    });
    source.onerror = () => {
      if (es !== source) return;
      source.close();
      es = null;
      reconnects += 1;
      section.dataset.reconnects = String(reconnects);
      again();
    };
  }
  open();
}

/* One attempt's whole log (GET /runs/{id}/log?attempt=n, read in windows), coloured;
 * the run page opens it from its attempts table. */
function attemptLog(runId, n) {
  const pre = h('pre.log', { id: 'attempt-log', 'data-attempt': String(n), tabIndex: 0,
    'aria-labelledby': 'attempt-log-h' });
  const problem = h('div.alert.error', { role: 'alert', hidden: true });
  const el = h('section', { id: 'attempt-log-section' },
    h('h3', { id: 'attempt-log-h' }, t('att.logTitle', { n })), problem, pre);
  const colours = ansiParser();
  (async () => {
    let offset = 0;
    for (;;) {
      const res = await api('GET', apiPath('runs', runId, 'log') + q({ offset, attempt: n }),
        undefined, { raw: true });
      const text = await res.text();
      if (!text) break;
      for (const piece of colours(text)) pre.append(pieceNode(piece));
      offset = Number(res.headers.get('X-Log-Next-Offset'));
    }
    pre.dataset.loaded = 'true';
  })().catch((e) => showProblem(problem, e.code || 'ERROR', e.body && e.body.kind, e.message,
    'attempt'));
  return el;
}

async function downloadLog(runId, button, problem) {
  button.disabled = true;
  if (problem.dataset.from === 'download') problem.hidden = true;
  try {
    const parts = [];
    let offset = 0;
    for (;;) {
      const res = await api('GET', apiPath('runs', runId, 'log') + q({ offset }),
        undefined, { raw: true });
      const buf = await res.arrayBuffer();
      if (!buf.byteLength) break;
      parts.push(buf);
      offset = Number(res.headers.get('X-Log-Next-Offset'));
    }
    saveFile(new Blob(parts, { type: 'text/plain' }), `run-${runId}.log`);
  } catch (e) {
    // 409 LOG_NOT_REGULAR_FILE, 410 LOG_EVICTED, 503 LOG_READ_TIMEOUT / LOG_READ_BUSY:
    // and 503 NODE_UNAVAILABLE (fleet mode): said in the log card, where it stays (a
    // toast would be gone in 6 s)
    const down = e.code === 'NODE_UNAVAILABLE';
    if (down || e.code.startsWith('LOG_')) {
      showProblem(problem, e.code, e.body.kind, down ? downText(e.body) : e.message, 'download');
    } else {
      notify(e.message, 'error');
    }
  } finally {
    button.disabled = false;
  }
}

export { logSection, attemptLog, ansiParser };
