/*
 * Send a notification from a task, QingLong style:
 *   const { sendNotify } = require('./sendNotify');
 *   await sendNotify(title, content);
 *
 * Shipped by qledge into the scripts folder on first start (a file of the same
 * name that is already there is never replaced; delete it to get this one back).
 * The message goes to the operator's notification channels, and to the services
 * the QingLong notification envs describe (docs/notifications.md). It works only
 * inside a run: qledge gives each run a credential (QL_NOTIFY_TOKEN) that is
 * good for notifying only, until that run ends.
 */
'use strict';

const http = require('http');

const MAX_TITLE = 200;
const MAX_CONTENT = 4000;

/** Resolves true if qledge accepted the message; never rejects. */
function sendNotify(title, content = '', ...ignored) {
  const url = process.env.QL_NOTIFY_URL;
  const token = process.env.QL_NOTIFY_TOKEN;
  if (!url || !token) {
    console.log('notify: not running as a qledge task; nothing sent');
    return Promise.resolve(false);
  }
  const body = Buffer.from(JSON.stringify({
    title: String(title).slice(0, MAX_TITLE),
    content: String(content === undefined || content === null ? '' : content).slice(0, MAX_CONTENT),
  }));
  return new Promise((resolve) => {
    const req = http.request(url, {
      method: 'POST',
      timeout: 15000,
      headers: {
        Authorization: `Bearer ${token}`,
        'Content-Type': 'application/json',
        'Content-Length': body.length,
      },
    }, (res) => {
      res.resume();
      res.on('end', () => {
        if (res.statusCode < 200 || res.statusCode >= 300) {
          console.log(`notify: qledge refused the message (HTTP ${res.statusCode})`);
        }
        resolve(res.statusCode >= 200 && res.statusCode < 300);
      });
    });
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', (err) => {
      console.log(`notify: qledge is unreachable: ${err.message}`);
      resolve(false);
    });
    req.end(body);
  });
}

module.exports = { sendNotify };
