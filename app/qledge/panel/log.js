/* qledge panel: the live log of a run and its download (run.js shows the section). */

import { t, words, statusLabel, fmtTime, h, fill, btn, apiPath, saveFile, notify, api, q, onLeave } from './core.js';
const LOG_KEEP = 2000000; // characters of log kept on the page (the download has it all)

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
    problem, note, trimmed, pre);
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

  function appendText(text) {
    const stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 24;
    pre.append(document.createTextNode(text));
    kept += text.length;
    if (kept > LOG_KEEP) {
      const all = pre.textContent;
      pre.textContent = all.slice(all.length - LOG_KEEP / 2);
      kept = pre.textContent.length;
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

export { logSection };
