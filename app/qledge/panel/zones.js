/* qledge panel: time zones (docs/panel.md "Time"). The one rule: every time the panel
 * shows says its zone — core.js's fmtTime appends the offset ("UTC", "UTC+8") of the zone
 * it formats in. No imports: core.js imports this. */

export function browserZone() {
  try { return Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC'; } catch (e) { return 'UTC'; }
}

// "UTC", "UTC+8", "UTC-3:30": the offset of `timeZone` (the browser's when empty) at `ms`.
export function zoneTag(ms, timeZone) {
  try {
    const part = new Intl.DateTimeFormat('en-GB', { timeZone: timeZone || undefined,
      timeZoneName: 'shortOffset' }).formatToParts(new Date(ms)).find((p) => p.type === 'timeZoneName');
    const tag = part ? part.value.replace(/^GMT/, 'UTC') : '';
    return tag === 'UTC+0' ? 'UTC' : tag;
  } catch (e) { return ''; }
}

// Two zones differ when their offsets differ now or in half a year (one keeps summer time).
export function zonesDiffer(a, b) {
  const now = Date.now(); const later = now + 182 * 86400e3;
  return zoneTag(now, a) !== zoneTag(now, b) || zoneTag(later, a) !== zoneTag(later, b);
}
