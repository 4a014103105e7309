"""`task <path> [now] ...` for operators: a tracked run through the API (docs/tasks.md).

`docker exec qledge task hello.py now` runs the task whose command is exactly
`task hello.py now` — created on first use (no schedule, label `cli`,
concurrency allow) and reused afterwards — then streams the run's log and exits
with the run's exit code. Everything goes through the worker's HTTP API with
the admin token, read the way the worker gets it (docs/security.md); this
process never touches the database, the receipts or the logs.

Exit status: the script's exit code (for `conc`, the run's: 0, or the first
failed child's); 124 when the run timed out; 1 for any other end without an
exit code (refused form, lost, cancelled, blocked); 2 for
a bad command line or an unreachable API. Ctrl-C detaches: the run goes on.
"""

from __future__ import annotations

import http.client
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from ..taskform import TaskFormError, parse

POLL_S = 0.3


class CliError(Exception):
    pass


def admin_token(environ: dict[str, str]) -> str:
    """The admin token as the worker has it: QLEDGE_ADMIN_TOKEN_FILE, the file the
    image's entrypoint writes into the run directory, QLEDGE_ADMIN_TOKEN, or the
    generated data/secrets/admin.token."""
    state = environ.get("QLEDGE_STATE_DIR", "/var/lib/qledge")
    candidates = [
        environ.get("QLEDGE_ADMIN_TOKEN_FILE", ""),
        str(Path(environ.get("QLEDGE_RUN_DIR", "/run/qledge")) / "admin.token"),
    ]
    for name in candidates:
        if name and os.path.isfile(name):
            return _read(name)
    if environ.get("QLEDGE_ADMIN_TOKEN"):
        return environ["QLEDGE_ADMIN_TOKEN"].strip()
    data = environ.get("QLEDGE_DATA_DIR") or str(Path(state) / "data")
    generated = Path(data) / "secrets" / "admin.token"
    if generated.is_file():
        return _read(str(generated))
    raise CliError("no admin token found (QLEDGE_ADMIN_TOKEN_FILE, /run/qledge/admin.token,"
                   " QLEDGE_ADMIN_TOKEN or data/secrets/admin.token)")


def _read(name: str) -> str:
    try:
        return Path(name).read_text().strip()
    except OSError as exc:
        raise CliError(f"cannot read the admin token file: {exc.strerror}") from None


class Api:
    def __init__(self, host: str, port: int, token: str) -> None:
        self.host, self.port, self.token = host, port, token

    def call(self, method: str, path: str, body: object = None) -> tuple[int, Any, dict[str, str]]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            headers = {"Authorization": f"Bearer {self.token}"}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            conn.request(method, f"/api/v1{path}", body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
        except OSError as exc:
            raise CliError(f"the qledge API at {self.host}:{self.port} is unreachable:"
                           f" {exc}") from None
        finally:
            conn.close()
        if "json" in hdrs.get("content-type", ""):
            return resp.status, json.loads(raw or b"null"), hdrs
        return resp.status, raw, hdrs

    def json(self, method: str, path: str, body: object = None) -> Any:
        status, out, _ = self.call(method, path, body)
        if status >= 400:
            msg = out.get("message") if isinstance(out, dict) else ""
            raise CliError(f"{method} {path}: HTTP {status} {msg or ''}".rstrip())
        return out


def follow(api: Api, run_id: str, out: Any) -> dict[str, Any]:
    """Copy the log to `out` until the run is terminal and the log read to its end."""
    offset = 0
    while True:
        status, data, hdrs = api.call("GET", f"/runs/{run_id}/log?offset={offset}")
        if status == 200 and isinstance(data, bytes):
            if data:
                out.write(data)
                out.flush()
            offset = int(hdrs.get("x-log-next-offset", offset + len(data)))
            done = hdrs.get("x-run-terminal") == "true" and not data
        else:  # 410 (evicted) or no attempt yet: the run row still tells the end
            done = hdrs.get("x-run-terminal") == "true"
        if done:
            run: dict[str, Any] = api.json("GET", f"/runs/{run_id}")
            if run["terminal"]:
                return run
        if not data:
            time.sleep(POLL_S)


def exit_code(run: dict[str, Any]) -> int:
    if run["exit_code"] is not None and run["reason_code"] in ("EXITED", "CONC_CHILDREN"):
        return int(run["exit_code"])
    return 124 if run["status"] == "timed_out" else 1


def main(words: list[str], environ: dict[str, str] | None = None) -> int:
    env = dict(os.environ if environ is None else environ)
    command = shlex.join(["task", *words])
    try:
        parse(command, Path(env.get("QLEDGE_WORK_DIR") or
                            Path(env.get("QLEDGE_STATE_DIR", "/var/lib/qledge"))
                            / "work") / "scripts")
    except TaskFormError as exc:
        print(f"task: {exc.reason.value}: {exc.message}", file=sys.stderr)
        return 2
    host = env.get("QLEDGE_HOST", "127.0.0.1")
    if host in ("", "0.0.0.0", "::", "[::]"):  # noqa: S104 - the worker's wildcard bind
        host = "127.0.0.1"
    try:
        api = Api(host, int(env.get("QLEDGE_PORT", "5700")), admin_token(env))
        # The worker finds or creates the task (operations/script_runs.py), one for many callers.
        started = api.json("POST", "/scripts/run", {"command": command})
        run, task_id = started["run"], started["task_id"]
        print(f"task: run {run['id']} of task {task_id}", file=sys.stderr)
        try:
            run = follow(api, run["id"], sys.stdout.buffer)
            # `conc`: each child's log, one after the other, as QingLong prints them.
            for child in run.get("children", []):
                follow(api, child["id"], sys.stdout.buffer)
        except KeyboardInterrupt:
            print(f"task: detached; run {run['id']} goes on", file=sys.stderr)
            return 130
    except CliError as exc:
        print(f"task: {exc}", file=sys.stderr)
        return 2
    if run["reason_code"] != "EXITED":
        events = api.json("GET", f"/runs/{run['id']}/events")
        finished = [e for e in events.get("items", []) if e["type"] == "run.finished"]
        message = finished[-1]["data"].get("message", "") if finished else ""
        print(f"task: {run['status']} ({run['reason_code']}){': ' + message if message else ''}",
              file=sys.stderr)
    return exit_code(run)
