/* qledge panel: an API refusal in the reader's language (issue 38, docs/api.md "Errors").
 * The answer's `code` (else its `error`: http/codes.py) and `params`, or a field rule's `rule`, are
 * said from i18n.js (`err.<CODE>`, `code.<rule>`); the server's English `message` is shown
 * in English only. A code the catalogue lacks is named with a translated sentence, never
 * with the server's English (tests/test_error_codes.py keeps the catalogue complete). */
import { STRINGS } from './i18n.js';

// Params that are themselves words of the catalogue: the kind of value expected, what
// was not found, the unit of a limit, the field (its name without an index: `specs[0]`).
const WORDS = { expected: 'err.kind.', what: 'err.what.', unit: 'code.unit.' };

function say(table, key, vars) {
  return table[key].replace(/\{(\w+)\}/g, (m, k) => String(vars[k] ?? ''));
}

function fieldWord(table, field) {
  if (!field) return '';
  const bare = String(field).replace(/\[\d+\]/g, '').split('.').pop();
  return table['field.' + bare] || String(field);
}

function errorText(body, english, lang) {
  const b = body || {};
  if (lang === 'en' || (!b.error && !b.rule)) return english;
  const table = STRINGS[lang] || STRINGS.en;
  const vars = { ...b, ...(b.params || {}), field: fieldWord(table, b.field) };
  for (const [name, prefix] of Object.entries(WORDS)) {
    if (vars[name] != null) vars[name] = table[prefix + vars[name]] || String(vars[name]);
  }
  if (b.error === 'NOT_FOUND' && !vars.what) vars.what = table['err.what.item'];
  // A field rule, else the precise `code`, else the class's `error` (what every answer has).
  const keys = typeof b.rule === 'string' ? ['code.' + b.rule] : ['err.' + b.code, 'err.' + b.error];
  const key = keys.find((k) => table[k]);
  if (key) return say(table, key, vars);
  return say(table, 'err.unknownCode', { code: b.rule || b.code || b.error });
}

export { errorText };
