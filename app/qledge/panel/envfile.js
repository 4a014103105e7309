/* qledge panel: envs to and from QingLong's envs JSON (docs/panel.md, Envs). No DOM:
 * tested under node (tests/panel/envfile.test.mjs). */
import { t } from './core.js';

const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

// The file QingLong's Envs page exports: an array of rows (status 0 enabled, 1 disabled).
function exportEnvs(envs) {
  return JSON.stringify(envs.map((e) => ({ name: e.name, value: e.value,
    remarks: e.remarks || '', status: e.enabled ? 0 : 1 })), null, 2) + '\n';
}

/* A QingLong envs file (the array, or an API answer {data: [...]}) as the items of
 * POST /api/v1/envs/import. Other keys of a row (id, position, timestamp…) are left out.
 * A malformed file: { error: the reason in words }, naming the first bad row (1-based). */
function parseEnvFile(text) {
  const got = parse(text);
  return got.error ? { error: t(got.error, got.vars) } : got;
}

function parse(text) {
  let data;
  try { data = JSON.parse(text); } catch (e) { return { error: 'envs.bad.json' }; }
  if (data && !Array.isArray(data) && Array.isArray(data.data)) data = data.data;
  if (!Array.isArray(data)) return { error: 'envs.bad.array' };
  if (!data.length) return { error: 'envs.bad.empty' };
  const items = [];
  for (const [i, row] of data.entries()) {
    const n = i + 1;
    if (!row || typeof row !== 'object' || Array.isArray(row)) return { error: 'envs.bad.row', vars: { n } };
    const name = typeof row.name === 'string' ? row.name.trim() : row.name;
    if (typeof name !== 'string' || !NAME.test(name)) return { error: 'envs.bad.name', vars: { n } };
    if (typeof row.value !== 'string') return { error: 'envs.bad.value', vars: { n } };
    if (row.remarks != null && typeof row.remarks !== 'string') return { error: 'envs.bad.remarks', vars: { n } };
    if (row.status != null && row.status !== 0 && row.status !== 1) return { error: 'envs.bad.status', vars: { n } };
    items.push({ name, value: row.value, remarks: row.remarks || '', enabled: row.status !== 1 });
  }
  return { items };
}

/* A textarea turns every CR LF into LF (HTML's value normalisation), so the value is kept
 * beside it, raw: an edit of the textarea (`before` -> `after`, both as it shows them) is
 * spliced into `raw`; a paste brings its own text (`pasted`, CR LF and all) in. */
function splice(raw, before, after, pasted) {
  let p = 0;
  while (p < before.length && p < after.length && before[p] === after[p]) p += 1;
  let s = 0;
  while (s < before.length - p && s < after.length - p
    && before[before.length - 1 - s] === after[after.length - 1 - s]) s += 1;
  let mid = after.slice(p, after.length - s);
  if (pasted != null && pasted.replace(/\r\n?/g, '\n') === mid) mid = pasted;
  const at = (i) => { // the raw index of `before`'s index i (CR LF is one there)
    let r = 0;
    for (let n = 0; n < i && r < raw.length; n += 1) r += raw[r] === '\r' && raw[r + 1] === '\n' ? 2 : 1;
    return r;
  };
  return raw.slice(0, at(p)) + mid + raw.slice(at(before.length - s));
}

export { exportEnvs, parseEnvFile, splice };
