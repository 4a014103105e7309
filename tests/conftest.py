from __future__ import annotations

import asyncio
import os
import platform
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from qledge import paths, settings
from qledge.db import migrate
from qledge.db.connection import Database

ROOT = Path(__file__).resolve().parents[1]
ADMIN = "test-admin-token-0123456789abcdef"


def launcher_path() -> str:
    return os.environ.get(
        "QLEDGE_LAUNCHER", str(ROOT / "build" / "launcher" / platform.machine() / "ql-launch"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_settings(state: Path, **overrides: str) -> settings.Settings:
    env = {
        "QLEDGE_STATE_DIR": str(state),
        "QLEDGE_ADMIN_TOKEN": ADMIN,
        "QLEDGE_HOST": "127.0.0.1",
        "QLEDGE_LAUNCHER": launcher_path(),
        "QLEDGE_PUBLISH_GRACE_MS": "200",
    }
    env.update({f"QLEDGE_{k.upper()}": v for k, v in overrides.items()})
    conf = settings.load(env)
    paths.prepare_roots(conf)
    return conf


@pytest.fixture
def conf(tmp_path: Path) -> settings.Settings:
    return make_settings(tmp_path / "state")


@pytest.fixture
async def db(conf: settings.Settings) -> AsyncIterator[Database]:
    migrate.apply(conf.db_path)
    database = Database(conf.db_path)
    await database.open()
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture
def client(conf: settings.Settings) -> Iterator[TestClient]:
    from qledge.http.app import create_app

    migrate.apply(conf.db_path)
    app = create_app(conf, ADMIN)
    with TestClient(app, headers={"Authorization": f"Bearer {ADMIN}"}) as c:
        yield c


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]
