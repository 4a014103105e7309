/* qledge panel: the appliance's time zone in the browser (docs/panel.md "Time"). Learnt
 * once a session (`zone` of the task list or the overview a page loaded, else of GET
 * /api/v1/task-list?limit=1) — for the notice every signed-in
 * page shows while the browser's zone differs from it (dismissible, remembered per pair
 * of zones), and for the run page's "Times shown in" line. */
import { t, h, btn, api } from './core.js';
import { browserZone, zonesDiffer } from './zones.js';

const KEY = 'qledge.zoneNote';
let known = null; // a promise of the appliance's zone name

// A page that asked the task list or the overview anyway tells the zone (no extra request).
export function knowZone(zone) { if (zone && !known) known = Promise.resolve(zone); }

export function applianceZone() {
  if (!known) {
    known = api('GET', '/task-list?limit=1').then((r) => r.zone,
      () => { known = null; return null; });
  }
  return known;
}

function dismissed(pair) { try { return localStorage.getItem(KEY) === pair; } catch (e) { return false; } }

// Put the notice at the top of `main` once the zone is known, if it differs and was not dismissed.
// Asked a moment after the page is drawn, so that a page's own answer can tell the zone.
export function zoneNotice(main, alive) {
  setTimeout(() => alive() && applianceZone().then((zone) => {
    const here = browserZone();
    if (!zone || !alive() || !zonesDiffer(here, zone) || main.querySelector('.zone-note')) return;
    const pair = here + '|' + zone;
    if (dismissed(pair)) return;
    const note = h('div.alert.warn.zone-note', { role: 'note', 'data-role': 'zone-note' },
      h('p', t('zone.differ', { browser: here, appliance: zone })),
      btn(t('zone.dismiss'), () => {
        try { localStorage.setItem(KEY, pair); } catch (e) { /* kept for this page only */ }
        note.remove();
      }, 'small ghost', { 'data-action': 'dismiss-zone' }));
    main.prepend(note);
  }), 1500);
}

// The run page's zone line: the browser's zone, and the appliance's (what a task's own
// output, such as `date`, is printed in) when it differs.
export function zoneLine() {
  const here = browserZone();
  const el = h('span', { id: 'run-zone', 'data-zone': here }, t('zone.browser', { zone: here }));
  applianceZone().then((zone) => {
    if (zone && zonesDiffer(here, zone)) el.textContent = t('zone.both', { browser: here, appliance: zone });
  });
  return el;
}
