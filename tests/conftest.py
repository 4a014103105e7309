"""Fixtures only; the helpers tests import live in tests/support.py."""
from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from _pg import litedb, pg_dsn, pg_server, pgdb  # noqa: F401  (fixtures: a throwaway PostgreSQL)
from qledge import settings
from qledge.db import backend
from qledge.db.interface import Database
from qledge.runtime.lifecycle import Runtime

import _skips
from support import ADMIN, Server, make_runtime, make_settings, migrate_for


@pytest.fixture(autouse=True)
def _same_cwd() -> Iterator[None]:
    """Each test starts and ends in the same directory: an in-process Runtime chdirs
    into its work dir (tasks inherit the worker's cwd), and a later test's
    `python -m qledge` would then import from there — a work dir where a test may
    have planted a `qledge` package on purpose."""
    cwd = os.getcwd()
    try:
        yield
    finally:
        os.chdir(cwd)

@pytest.fixture
def conf(tmp_path: Path) -> settings.Settings:
    return make_settings(tmp_path / "state")

@pytest.fixture
async def db(conf: settings.Settings) -> AsyncIterator[Database]:
    migrate_for(conf)
    database = backend.database(conf)
    await database.open()
    try:
        yield database
    finally:
        await database.close()

@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[Runtime]:
    """A started in-process runtime on a fresh state directory (a module may define its
    own `rt` with other settings)."""
    runtime = make_runtime(tmp_path / "state")
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.stop()

@pytest.fixture
async def eager_rt(tmp_path: Path) -> AsyncIterator[Runtime]:
    """`rt` with spawn step 4 committed at once (identity grace 0): for tests of that
    commit itself; the grace's own window is tested in test_unrecorded.py."""
    runtime = make_runtime(tmp_path / "state", identity_grace_s="0")
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.stop()

@pytest.fixture
def client(conf: settings.Settings) -> Iterator[TestClient]:
    from qledge.http.app import create_app

    migrate_for(conf)
    app = create_app(conf, ADMIN)
    with TestClient(app, headers={"Authorization": f"Bearer {ADMIN}"}) as c:
        yield c

@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path / "state")
    try:
        yield srv
    finally:
        srv.stop()

def pytest_configure(config: pytest.Config) -> None:
    # Under CI a skip without a reviewed reason fails the run (tests/_skips.py).
    config.pluginmanager.register(_skips, "qledge-skips")

