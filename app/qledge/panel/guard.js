/* qledge panel: "may I leave this page?" (docs/panel.md, Leaving a page). A page registers
 * a question with beforeLeave(fn) (async, true: go); it is asked before any route change
 * and before the language switch or sign-out, and dropped when the page is left. Its
 * hashchange listener is added at import, before core.js's router (start()), so it can
 * stop a refused change from rendering; the refused hash is undone with replaceState. */
import { onLeave, render } from './core.js';

let guards = [];
let shown = location.hash; // the hash of the page on screen
let asking = false;
let bypass = false;

function beforeLeave(fn) {
  guards.push(fn);
  onLeave(() => { guards = guards.filter((g) => g !== fn); });
}

async function mayLeave() {
  for (const fn of guards) if (!(await fn())) return false;
  return true;
}

addEventListener('hashchange', async (e) => {
  const target = location.hash;
  if (asking || !guards.length) { if (!asking) shown = target; return; }
  e.stopImmediatePropagation(); // the router does not render this one (yet)
  if (target === shown) return;
  history.replaceState(null, '', shown || location.pathname);
  asking = true;
  let ok = false;
  try { ok = await mayLeave(); } finally { asking = false; }
  if (!ok) return;
  guards = [];
  shown = target;
  history.replaceState(null, '', target);
  render();
});

// The language switch and sign-out re-render the page too: they ask first as well.
document.addEventListener('click', (e) => {
  const b = e.target.closest('[data-action="lang"], [data-action="signout"]');
  if (!b || bypass || !guards.length) return;
  e.preventDefault();
  e.stopImmediatePropagation();
  mayLeave().then((ok) => {
    if (!ok) return;
    guards = [];
    bypass = true;
    try { b.click(); } finally { bypass = false; }
  });
}, true);

export { beforeLeave };
