"""Send a notification from a task, QingLong style: `from notify import send`.

Shipped by qledge into the scripts folder on first start (a file of the same
name that is already there is never replaced; delete it to get this one back).
The message goes to the operator's notification channels, and to the services
the QingLong notification envs describe (docs/notifications.md). It works only
inside a run: qledge gives each run a credential (QL_NOTIFY_TOKEN) that is
good for notifying only, until that run ends.
"""

import json
import os
import urllib.error
import urllib.request

MAX_TITLE = 200
MAX_CONTENT = 4000


def send(title, content="", *args, **kwargs):
    """Queue `title` / `content` for delivery; True if qledge accepted it.
    Extra arguments (QingLong's ignore_default_config=..., ...) are ignored."""
    url = os.environ.get("QL_NOTIFY_URL")
    token = os.environ.get("QL_NOTIFY_TOKEN")
    if not url or not token:
        print("notify: not running as a qledge task; nothing sent")
        return False
    body = json.dumps({"title": str(title)[:MAX_TITLE],
                       "content": str(content)[:MAX_CONTENT]}).encode("utf-8")
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Authorization": "Bearer " + token, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return 200 <= response.status < 300
    except urllib.error.HTTPError as exc:
        print("notify: qledge refused the message (HTTP %d)" % exc.code)
    except OSError as exc:
        print("notify: qledge is unreachable: %s" % exc)
    return False


if __name__ == "__main__":
    import sys

    ok = send(sys.argv[1] if len(sys.argv) > 1 else "qledge",
              sys.argv[2] if len(sys.argv) > 2 else "")
    sys.exit(0 if ok else 1)
