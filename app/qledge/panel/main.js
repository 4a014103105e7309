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

Object.assign(pages, {
  login: viewLogin, overview: viewOverview, tasks: viewTasks, taskEditor: viewTaskEditor, runs: viewRuns, run: viewRun,
  envs: viewEnvs, deps: viewDeps, subs: viewSubs, notifications: viewNotify, scripts: viewScripts,
  system: viewSystem, account: viewAccount,
});
start();
