/* qledge panel: the entry module, index.html's one script. It gives the router in core.js
 * each page's view, then draws the first page (modules run once the document is parsed). */
import { pages, start } from './core.js';
import { viewLogin } from './login.js';
import { viewTasks } from './tasks.js';
import { viewOverview } from './overview.js';
import { viewTaskEditor } from './editor.js';
import { viewRuns } from './runs.js';
import { viewRun } from './run.js';
import { viewEnvs } from './envs.js';
import { viewDeps } from './dependencies.js';
import { viewSubs } from './subscriptions.js';
import { viewNotify } from './notifications.js';
import { viewScripts } from './scripts.js';
import { viewSystem } from './system.js';
import { viewAccount } from './account.js';
import { zoneNotice } from './zonenote.js';

// Every signed-in page gets the time-zone notice (zonenote.js); `alive` is the one
// function among a view's arguments.
const noted = (view) => (main, ...rest) => {
  const out = view(main, ...rest);
  zoneNotice(main, rest.find((a) => typeof a === 'function'));
  return out;
};
const views = {
  overview: viewOverview, tasks: viewTasks, taskEditor: viewTaskEditor, runs: viewRuns, run: viewRun,
  envs: viewEnvs, deps: viewDeps, subs: viewSubs, notifications: viewNotify, scripts: viewScripts,
  system: viewSystem, account: viewAccount,
};
Object.assign(pages, Object.fromEntries(Object.entries(views).map(([k, v]) => [k, noted(v)])),
  { login: viewLogin });
start();
