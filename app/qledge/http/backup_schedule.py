"""GET/PUT /api/v1/backup/schedule (docs/backup.md "Scheduled backups"): the scheduled
backup into a directory, kept as one internal task (backup/schedule_task.py); and
POST /backup/scheduled, where a run of that task asks the worker to write it.

A task cannot read the database (Landlock keeps the data dir from every task), so the
worker writes the archive; the run's process holds the request open and prints the
lines it answers, so the backup has the run's log, exit code and notifications. The
caller proves it is that run with its per-attempt credential (QL_NOTIFY_TOKEN): only
while the attempt is active, and only for the scheduled backup's own task."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from .. import operations
from ..db import attempts, runs
from ..db import backup_schedule as stored
from ..model import ACTIVE_ATTEMPT
from ..notifications import rules as notify
from .backup_encrypted import EncryptionUnavailable
from .context import runtime_of
from .errors import (
    Forbidden,
    Invalid,
    StateConflict,
    Unauthorized,
    decode_body,
    json_response,
)

log = logging.getLogger("qledge.backup")
PROGRESS_S = 30.0  # a line at least this often: the task's read timeout is 300 s


class NotTheScheduledRun(Forbidden):
    code = "BACKUP_NOT_SCHEDULED_RUN"


class ScheduleEdited(Forbidden):
    code = "BACKUP_SCHEDULE_EDITED"


class BackupScheduleInvalid(Invalid):
    code = "BACKUP_SCHEDULE_INVALID"  # replaced by the precise BACKUP_* code


async def get_schedule(request: Request) -> Response:
    # Imported on use: the backup package loads tarfile, which an idle worker never does
    # (tests/test_imports_idle.py).
    from ..backup import schedule_task as sched

    rt = runtime_of(request)
    async with rt.db.read() as tx:
        task = await stored.scheduled_task(tx)
    encrypted = await asyncio.to_thread(sched.passphrase_path(rt.settings).exists)
    return json_response(sched.read_back(task, encrypted=encrypted))


async def put_schedule(request: Request) -> Response:
    from ..backup import schedule_task as sched  # on use, as in get_schedule()

    rt = runtime_of(request)
    if rt.settings.fleet:
        raise StateConflict("fleet mode keeps its data in PostgreSQL: back it up with"
                            " pg_dump (docs/backup.md)")
    body = decode_body(await request.body(), sched.ScheduleIn)
    try:  # off the loop: it stats the directory, which may be a slow network share
        req = await asyncio.to_thread(sched.validate, rt.settings, body)
    except sched.ScheduleInvalid as exc:
        err = BackupScheduleInvalid(str(exc), field=exc.field, extra={"params": exc.params})
        err.code = exc.code
        raise err from None
    if isinstance(req.passphrase, str):
        from ..backup import crypto

        try:
            crypto.require()
        except crypto.EncryptionUnavailable as exc:
            raise EncryptionUnavailable(str(exc)) from None
    if not isinstance(req.passphrase, msgspec.UnsetType):
        await asyncio.to_thread(sched.store_passphrase, rt.settings, req.passphrase)
    fields = sched.task_fields(req)
    async with rt.db.read() as tx:
        task = await stored.scheduled_task(tx)
    if task is None:
        task = await operations.create_task(rt, fields)
    else:
        task = await operations.update_task(rt, task.id, fields)
    encrypted = await asyncio.to_thread(sched.passphrase_path(rt.settings).exists)
    return json_response(sched.read_back(task, encrypted=encrypted))


async def run_scheduled(request: Request) -> Response:
    from ..backup import schedule_run
    from ..backup import schedule_task as sched

    rt = runtime_of(request)
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    attempt_id = notify.script_attempt(rt.notify_key, token.strip()) \
        if scheme.lower() == "bearer" else None
    if attempt_id is None:
        raise Unauthorized("missing or invalid run credential")
    async with rt.db.read() as tx:
        attempt = await attempts.find_attempt(tx, attempt_id)
        if attempt is None or attempt.status not in ACTIVE_ATTEMPT:
            raise Forbidden("the run of this credential has finished")
        run = await runs.get_run(tx, attempt.run_id)
        task = await stored.scheduled_task(tx)
    if task is None or task.id != run.task_id:
        raise NotTheScheduledRun("only a run of the scheduled backup's task may ask for it")
    req = sched.settings_of(task)
    if req is None:
        raise ScheduleEdited("the scheduled backup's command was edited by hand: save the"
                             " schedule again (PUT /api/v1/backup/schedule)")
    if rt.settings.fleet:
        raise StateConflict("fleet mode keeps its data in PostgreSQL: back it up with"
                            " pg_dump (docs/backup.md)")
    passphrase = await asyncio.to_thread(sched.read_passphrase, rt.settings)
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str | None] = asyncio.Queue()
    gone = threading.Event()

    def say(line: str) -> None:
        loop.call_soon_threadsafe(lines.put_nowait, line)

    def work() -> None:
        try:
            done = schedule_run.run_into_dir(
                rt.settings, Path(req.directory), req.keep, with_logs=req.with_logs,
                with_history=req.with_history, say=say, gone=gone, passphrase=passphrase)
            say(f"ok: {done.path}")
        except Exception as exc:  # said in the run's log, which ends with exit code 2
            log.warning("scheduled backup failed: %s", exc)
            say(f"error: backup failed: {exc}")
        finally:
            loop.call_soon_threadsafe(lines.put_nowait, None)

    async def body() -> AsyncIterator[bytes]:
        writer = loop.run_in_executor(None, work)
        try:
            while True:
                try:
                    line = await asyncio.wait_for(lines.get(), PROGRESS_S)
                except TimeoutError:
                    yield b"still writing\n"
                    continue
                if line is None:
                    break
                yield (line + "\n").encode()
            await writer
        finally:
            gone.set()  # the run ended early: the writer stops at its next chunk

    return StreamingResponse(body(), media_type="text/plain; charset=utf-8",
                             headers={"Cache-Control": "no-store"})


routes = [Route("/backup/schedule", get_schedule, methods=["GET"]),
          Route("/backup/schedule", put_schedule, methods=["PUT"])]
# Outside /api/v1 (AdminAuth): the caller is a task with its run's credential.
public_routes = [Route("/backup/scheduled", run_scheduled, methods=["POST"])]
