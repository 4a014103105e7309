"""Settings: one frozen Struct, read from QLEDGE_* env vars and an optional TOML file.

Unknown keys fail start-up naming the key, so a typo never silently falls
back to a default.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Annotated, Literal

import msgspec

ProfileName = Literal["edge", "standalone", "cluster-control", "cluster-worker"]
# Fleet profiles (docs/fleet.md, "Setting it up"): only with database_url set.
_CLUSTER = ("cluster-control", "cluster-worker")
_DSN_SCHEMES = ("postgresql://", "postgres://")
# A guessable admin token is no lock at all; the generated one has 43 characters.
MIN_ADMIN_TOKEN = 32


class SettingsError(Exception):
    """A configuration problem that must stop start-up with this message."""


class Profile(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Resource limits of the periodic loops (docs/recovery.md, the profile table)."""

    name: ProfileName
    round_interval_s: float
    pages: int
    page_size: int
    publish_grace_ms: int
    journal_retention_s: float
    quarantine_retention_s: float
    max_concurrent_attempts: int
    kill_grace_s: float
    # Bounded disk (docs/retention.md). keep_*/logs_cap_mb: 0 = no such limit.
    retention_interval_s: float
    retention_pages: int
    retention_page_size: int
    keep_runs_per_task: int
    keep_days: int
    logs_cap_mb: int
    low_water_mb: int
    low_water_pct: float
    # Below this much free space a task's newest finished log may go too
    # (DISK_CRITICAL); above it, pressure evicts only older logs.
    critical_water_mb: int
    vacuum_pages_per_round: int
    wal_checkpoint_mb: int
    # How long a result committed without its own fsync may wait to share one
    # (the next durable commit) before its receipt is deleted; docs/storage.md.
    group_commit_s: float
    # How long a launcher's identity may wait in memory for its result's commit
    # before it gets one of its own (docs/contract.md §3 step 4); 0: at once.
    identity_grace_s: float


PROFILES: dict[str, Profile] = {
    "edge": Profile(
        name="edge",
        round_interval_s=30.0,
        pages=2,
        page_size=8,
        publish_grace_ms=50,
        journal_retention_s=120.0,
        quarantine_retention_s=300.0,
        # A Pi has 4 small cores and often 1 GiB: a few parallel scripts at most.
        max_concurrent_attempts=4,
        kill_grace_s=10.0,
        # A 16-32 GB SD card shared with the OS: small caps, few writes per round.
        retention_interval_s=120.0,
        retention_pages=4,
        retention_page_size=16,
        keep_runs_per_task=50,
        keep_days=14,
        logs_cap_mb=256,
        low_water_mb=64,
        low_water_pct=2.0,
        critical_water_mb=16,
        vacuum_pages_per_round=256,
        wal_checkpoint_mb=4,
        group_commit_s=2.0,
        identity_grace_s=2.0,
    ),
    "standalone": Profile(
        name="standalone",
        round_interval_s=5.0,
        pages=4,
        page_size=32,
        publish_grace_ms=100,
        journal_retention_s=60.0,
        quarantine_retention_s=3600.0,
        max_concurrent_attempts=16,
        kill_grace_s=10.0,
        retention_interval_s=30.0,
        retention_pages=8,
        retention_page_size=64,
        keep_runs_per_task=200,
        keep_days=30,
        logs_cap_mb=4096,
        low_water_mb=256,
        low_water_pct=1.0,
        critical_water_mb=64,
        vacuum_pages_per_round=2048,
        wal_checkpoint_mb=16,
        group_commit_s=0.5,
        identity_grace_s=0.5,
    ),
}
# A control node has the standalone box's room; a worker node may be a Pi (edge limits).
PROFILES["cluster-control"] = msgspec.structs.replace(PROFILES["standalone"],
                                                      name="cluster-control")
PROFILES["cluster-worker"] = msgspec.structs.replace(PROFILES["edge"], name="cluster-worker")


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    profile: ProfileName = "edge"
    state_dir: str = "./var"
    data_dir: str = ""
    receipts_dir: str = ""
    logs_dir: str = ""
    work_dir: str = ""
    host: str = "0.0.0.0"  # noqa: S104 - an appliance listens on its LAN address
    port: int = 5700
    admin_token: str = ""
    # A file holding the admin token instead (the image's entrypoint hands the
    # operator's QLEDGE_ADMIN_TOKEN over this way; docker secrets work too).
    admin_token_file: str = ""
    launcher: str = ""
    # Landlock confinement of tasks (docs/security.md): "auto" confines where the
    # kernel can and says so where it cannot; "required" starts nothing unconfined.
    task_isolation: Literal["auto", "required", "off"] = "auto"
    # Overrides of single profile numbers (tests and operators); 0 = profile value.
    round_interval_s: float = 0.0
    publish_grace_ms: int = 0
    max_concurrent_attempts: int = 0
    kill_grace_s: float = 0.0
    # Unset = profile value; 0 = every identity committed at once.
    identity_grace_s: Annotated[float, msgspec.Meta(ge=0, le=60)] | None = None
    # What SIGTERM to the worker does with running tasks: "leave" them for the
    # next worker (default; they do not depend on it) or "cancel" them.
    shutdown_policy: Literal["leave", "cancel"] = "leave"
    shutdown_drain_s: float = 15.0
    log_read_limit: int = 1 << 20
    # Largest request body any route accepts (413 beyond; docs/api.md).
    max_body_bytes: Annotated[int, msgspec.Meta(ge=4096, le=1 << 30)] = 1 << 20
    # Bounded disk (docs/retention.md): 0 = profile value for the interval; for the
    # others unset = profile value and 0 = no such limit (low_water_*: 0 = off).
    retention_interval_s: float = 0.0
    keep_runs_per_task: Annotated[int, msgspec.Meta(ge=0)] | None = None
    keep_days: Annotated[int, msgspec.Meta(ge=0)] | None = None
    logs_cap_mb: Annotated[int, msgspec.Meta(ge=0)] | None = None
    low_water_mb: Annotated[int, msgspec.Meta(ge=0)] | None = None
    low_water_pct: Annotated[float, msgspec.Meta(ge=0, le=50)] | None = None
    # A volume whose filesystem reports no size (no statfs): "off" = not guarded
    # (default; the writes tell), "hold" = hold new attempts (DISK_FREE_UNKNOWN).
    disk_guard_unknown: Literal["off", "hold"] = "off"
    critical_water_mb: Annotated[int, msgspec.Meta(ge=0)] | None = None
    # Notifications (docs/notifications.md): the panel's address for the run link,
    # the sender's idle round, and the retry bounds of one message.
    notify_base_url: str = ""
    notify_interval_s: Annotated[float, msgspec.Meta(gt=0)] = 60.0
    notify_retry_base_s: Annotated[float, msgspec.Meta(gt=0)] = 10.0
    notify_max_tries: Annotated[int, msgspec.Meta(ge=1, le=100)] = 8
    notify_max_age_s: Annotated[float, msgspec.Meta(gt=0)] = 86400.0
    # The panel's sign-in (docs/security.md): a session ends after this long unused, and
    # at the latest this long after it began; a new browser's sign-in is notified; the
    # cookie is `Secure` over TLS, and behind a proxy only if it is trusted to say so
    # (`X-Forwarded-Proto: https`, only with trust_forwarded_proto).
    session_idle_s: Annotated[int, msgspec.Meta(ge=60, le=90 * 86400)] = 7 * 86400
    session_max_s: Annotated[int, msgspec.Meta(ge=300, le=365 * 86400)] = 30 * 86400
    signin_notify: bool = True
    trust_forwarded_proto: bool = False
    # GET /metrics without the admin token (docs/metrics.md): only on a trusted LAN.
    metrics_public: bool = False
    # QingLong's RandomDelay: a scheduled `task <path>` (no `now`, desi or conc) waits
    # up to this many seconds before it starts (docs/tasks.md); 0 = off.
    random_delay_s: Annotated[int, msgspec.Meta(ge=0, le=86400)] = 0
    # Dependencies (docs/dependencies.md): package mirrors (none: pip's and npm's own
    # defaults; credentials in them are never logged) and one install run's timeout.
    pip_index_url: str = ""
    pip_extra_index_urls: str = ""  # space-separated
    npm_registry: str = ""
    deps_timeout_s: Annotated[int, msgspec.Meta(ge=10, le=86400)] = 1800
    # Fleet mode (docs/fleet.md): `postgresql://…` puts this node on that shared
    # database; empty = the embedded SQLite (one node, the default).
    database_url: str = ""
    database_url_file: str = ""  # the same from a file (it may hold a password)
    # This node in the fleet: its name (default: the host name), labels added to
    # `arch=…` and `node=…` (space-separated), and where the other nodes reach it.
    node_name: str = ""
    node_labels: str = ""
    node_url: str = ""
    # The lease (database clock): after `node_lease_s` without a heartbeat another
    # node declares this node's runs `lost` (NODE_LEASE_EXPIRED).
    node_lease_s: Annotated[float, msgspec.Meta(ge=1, le=3600)] = 60.0
    node_heartbeat_s: Annotated[float, msgspec.Meta(gt=0, le=1200)] = 5.0
    # The scheduler's lease: one node fires the ticks; another takes over after this.
    leader_lease_s: Annotated[float, msgspec.Meta(ge=1, le=600)] = 10.0
    # The node-to-node HMAC key (log reads); required in fleet mode.
    cluster_secret: str = ""
    cluster_secret_file: str = ""
    # What a fenced node does with the launchers of its old epoch (their attempts are
    # already decided `lost`): "stop" them (TERM, then KILL) or "leave" them to finish.
    fenced_tasks: Literal["stop", "leave"] = "stop"

    @property
    def fleet(self) -> bool:
        """Fleet mode: this node runs on the shared PostgreSQL, not the embedded SQLite."""
        return bool(self.database_url)

    @property
    def profile_limits(self) -> Profile:
        base = PROFILES[self.profile]
        changes: dict[str, float | int] = {}
        if self.round_interval_s:
            changes["round_interval_s"] = self.round_interval_s
        if self.publish_grace_ms:
            changes["publish_grace_ms"] = self.publish_grace_ms
        if self.max_concurrent_attempts:
            changes["max_concurrent_attempts"] = self.max_concurrent_attempts
        if self.kill_grace_s:
            changes["kill_grace_s"] = self.kill_grace_s
        if self.retention_interval_s:
            changes["retention_interval_s"] = self.retention_interval_s
        for name in ("identity_grace_s", "keep_runs_per_task", "keep_days", "logs_cap_mb",
                     "low_water_mb", "low_water_pct", "critical_water_mb"):
            value = getattr(self, name)
            if value is not None:
                changes[name] = value
        return msgspec.structs.replace(base, **changes) if changes else base

    def _root(self, explicit: str, name: str) -> Path:
        return Path(explicit or os.path.join(self.state_dir, name)).absolute()

    @property
    def data_path(self) -> Path:
        return self._root(self.data_dir, "data")

    @property
    def receipts_path(self) -> Path:
        return self._root(self.receipts_dir, "receipts")

    @property
    def logs_path(self) -> Path:
        return self._root(self.logs_dir, "logs")

    @property
    def work_path(self) -> Path:
        """The tasks' working directory and HOME (their scripts live here)."""
        return self._root(self.work_dir, "work")

    @property
    def scripts_path(self) -> Path:
        """The scripts folder in the work volume (docs/scripts.md)."""
        return self.work_path / "scripts"

    @property
    def script_history_path(self) -> Path:
        """The scripts' previous versions: in the work volume, outside the scripts tree."""
        return self.work_path / ".scripts-history"

    @property
    def db_path(self) -> Path:
        return self.data_path / "qledge.sqlite3"


_FIELDS = {f.name: f.type for f in msgspec.structs.fields(Settings)}


def load(environ: dict[str, str] | None = None) -> Settings:
    """Settings from an optional TOML file (QLEDGE_CONFIG) overlaid by QLEDGE_* env vars."""
    env = os.environ if environ is None else environ
    raw: dict[str, object] = {}
    config = env.get("QLEDGE_CONFIG", "")
    if config:
        try:
            with open(config, "rb") as f:
                raw.update(tomllib.load(f))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise SettingsError(f"cannot read config file {config}: {exc}") from exc
    for key, value in env.items():
        if not key.startswith("QLEDGE_") or key in _IGNORED_ENV:
            continue
        name = key[len("QLEDGE_"):].lower()
        if name not in _FIELDS:
            raise SettingsError(f"unknown setting {key} (no field {name!r})")
        raw[name] = value
    try:
        conf = msgspec.convert(raw, Settings, strict=False)
    except msgspec.ValidationError as exc:
        raise SettingsError(f"invalid settings: {exc}") from exc
    conf = _with_token_file(conf)
    _check_mirrors(conf)
    check_admin_token(conf.admin_token, _FILE_SOURCE if conf.admin_token_file
                      else "QLEDGE_ADMIN_TOKEN")
    return _check_fleet(_with_fleet_files(conf))


def redact_dsn(url: str) -> str:
    """A database URL safe to log: no user, password or query (`?password=` exists)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host = parts.netloc.rpartition("@")[2]
    except ValueError:
        return "***"
    user = "***@" if "@" in parts.netloc else ""
    query = "?***" if parts.query else ""
    return f"{parts.scheme}://{user}{host}{parts.path}{query}"


def _read_secret(conf: Settings, field: str) -> Settings:
    """`<field>_file` read into `<field>` (a password or a key kept out of the env)."""
    path = getattr(conf, f"{field}_file")
    env = f"QLEDGE_{field.upper()}"
    if not path:
        return conf
    if getattr(conf, field):
        raise SettingsError(f"set {env} or {env}_FILE, not both")
    try:
        with open(path, encoding="utf-8") as f:
            value = f.read().strip()
    except OSError as exc:
        raise SettingsError(f"cannot read {env}_FILE: {exc}") from exc
    except UnicodeDecodeError:  # its message would quote a byte of the secret
        raise SettingsError(f"{env}_FILE is not UTF-8 text") from None
    if not value:
        raise SettingsError(f"{env}_FILE is empty")
    return msgspec.structs.replace(conf, **{field: value})


def _with_fleet_files(conf: Settings) -> Settings:
    return _read_secret(_read_secret(conf, "database_url"), "cluster_secret")


def _check_fleet(conf: Settings) -> Settings:
    """Fleet mode's settings (docs/fleet.md, "Setting it up"); without
    database_url a cluster profile is refused and the rest is not looked at."""
    from .node import NodeError, check_labels, check_name

    if not conf.fleet:
        if conf.profile in _CLUSTER:
            raise SettingsError(
                f"profile {conf.profile!r} is fleet mode: it needs QLEDGE_DATABASE_URL"
                " (or QLEDGE_DATABASE_URL_FILE), a postgresql:// URL of the shared"
                " database; one node on the embedded SQLite runs as 'edge' or"
                " 'standalone'")
        return conf
    url = conf.database_url
    if not url.startswith(_DSN_SCHEMES) or any(c.isspace() for c in url):
        raise SettingsError(f"QLEDGE_DATABASE_URL {redact_dsn(url)!r} must be a"
                            " postgresql:// (or postgres://) URL without spaces")
    if not conf.cluster_secret:
        raise SettingsError(
            "fleet mode (QLEDGE_DATABASE_URL set) needs QLEDGE_CLUSTER_SECRET or"
            " QLEDGE_CLUSTER_SECRET_FILE: the key the nodes sign their requests to each"
            " other with, the same on every node (e.g. `openssl rand -base64 33`)")
    secret = conf.cluster_secret
    if len(secret) < MIN_ADMIN_TOKEN or secret != secret.strip():
        raise SettingsError(
            f"the cluster secret is too weak: at least {MIN_ADMIN_TOKEN} characters"
            f" without surrounding whitespace (this one has {len(secret)})")
    if not conf.admin_token:
        raise SettingsError(
            "fleet mode (QLEDGE_DATABASE_URL set) needs QLEDGE_ADMIN_TOKEN (or"
            " QLEDGE_ADMIN_TOKEN_FILE), the same on every node: one API, one token (a"
            " generated token would differ from node to node)")
    for key, check in (("NODE_NAME", lambda: conf.node_name and check_name(conf.node_name)),
                       ("NODE_LABELS", lambda: check_labels(conf.node_labels.split()))):
        try:
            check()
        except NodeError as exc:
            raise SettingsError(f"QLEDGE_{key}: {exc}") from None
    if conf.node_url and not conf.node_url.startswith(("http://", "https://")):
        raise SettingsError("QLEDGE_NODE_URL must be an http:// or https:// URL")
    if conf.node_heartbeat_s * 3 > conf.node_lease_s:
        raise SettingsError(
            f"QLEDGE_NODE_HEARTBEAT_S ({conf.node_heartbeat_s:g}) must be at most a third"
            f" of QLEDGE_NODE_LEASE_S ({conf.node_lease_s:g}): a lease must survive a"
            " lost heartbeat or two")
    return conf


# The image's entrypoint hands the operator's QLEDGE_ADMIN_TOKEN over in this file.
_FILE_SOURCE = ("the token in QLEDGE_ADMIN_TOKEN_FILE"
                " (the image hands QLEDGE_ADMIN_TOKEN over in it)")


def _with_token_file(conf: Settings) -> Settings:
    """The admin token read from QLEDGE_ADMIN_TOKEN_FILE, if that is how it is given."""
    if not conf.admin_token_file:
        return conf
    if conf.admin_token:
        raise SettingsError("set QLEDGE_ADMIN_TOKEN or QLEDGE_ADMIN_TOKEN_FILE, not both")
    try:
        with open(conf.admin_token_file, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as exc:
        raise SettingsError(f"cannot read QLEDGE_ADMIN_TOKEN_FILE: {exc}") from exc
    except UnicodeDecodeError:  # its message would quote a byte of the secret
        raise SettingsError("QLEDGE_ADMIN_TOKEN_FILE is not UTF-8 text") from None
    if not token:
        raise SettingsError("QLEDGE_ADMIN_TOKEN_FILE holds no token")
    return msgspec.structs.replace(conf, admin_token=token)


def _check_mirrors(conf: Settings) -> None:
    from .dependencies.spec import mirror_error, redact_url

    for key, urls in (("PIP_INDEX_URL", [conf.pip_index_url]),
                      ("PIP_EXTRA_INDEX_URLS", conf.pip_extra_index_urls.split()),
                      ("NPM_REGISTRY", [conf.npm_registry])):
        for url in filter(None, urls):
            why = mirror_error(url)
            if why is not None:
                raise SettingsError(f"QLEDGE_{key} {redact_url(url)!r} {why}")


def check_admin_token(token: str, source: str) -> None:
    """Empty means "generate one"; anything else must be long enough to be unguessable."""
    if token and (len(token) < MIN_ADMIN_TOKEN or token != token.strip()):
        raise SettingsError(
            f"{source} is too weak: an admin token must be at least {MIN_ADMIN_TOKEN}"
            f" characters without surrounding whitespace (this one has {len(token)});"
            " use e.g. `openssl rand -base64 33`, or leave it unset to have one generated")


# Variables of the product's own tooling around the worker (the config file, the
# image's entrypoint and supervisord, log verbosity), not settings of the worker.
# Test and tool knobs are QLTEST_*, a name space the settings never read.
# QLEDGE_BACKUP_PASSPHRASE: read (and removed from its environment) by `qledge backup` and
# `qledge restore` only; set in a container's environment it must not stop the worker.
_IGNORED_ENV = frozenset({"QLEDGE_CONFIG", "QLEDGE_PYTHON", "QLEDGE_RUN_DIR", "QLEDGE_LOG_LEVEL",
                          "QLEDGE_BACKUP_PASSPHRASE"})
