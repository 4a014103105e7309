"""The run model (docs/contract.md §2) as msgspec Structs and enums. No I/O here."""

from __future__ import annotations

import enum

import msgspec


class RunStatus(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    LOST = "lost"
    BLOCKED = "blocked"


class AttemptStatus(enum.StrEnum):
    PREPARING = "preparing"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    LOST = "lost"
    BLOCKED = "blocked"


# The status sets, in one place: every other module (and every SQL spelling, see
# db/statuses.py) derives from these. Each status is in exactly one set of its
# kind (tests/test_statuses.py); a terminal attempt status is also a run status.
ACTIVE_RUN = frozenset({RunStatus.QUEUED, RunStatus.RUNNING})
TERMINAL_RUN = frozenset(
    {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TIMED_OUT,
     RunStatus.LOST, RunStatus.BLOCKED}
)
# Ends that trigger a task's `on_failure` chain (runtime/chains.py): the command did
# not succeed and nobody cancelled it.
FAILED_RUN = frozenset(
    {RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.LOST, RunStatus.BLOCKED})
ACTIVE_ATTEMPT = frozenset({AttemptStatus.PREPARING, AttemptStatus.RUNNING})
TERMINAL_ATTEMPT = frozenset(
    {AttemptStatus.SUCCEEDED, AttemptStatus.FAILED, AttemptStatus.CANCELLED,
     AttemptStatus.TIMED_OUT, AttemptStatus.LOST, AttemptStatus.BLOCKED}
)


class CancelReason(enum.StrEnum):
    USER = "user"
    TIMEOUT = "timeout"
    POLICY = "policy"
    SHUTDOWN = "shutdown"


class Trigger(enum.StrEnum):
    MANUAL = "manual"
    SCHEDULE = "schedule"
    API = "api"
    CHAIN = "chain"  # another task's run ended (on_success / on_failure / on_finish)


class Reason(enum.StrEnum):
    """Stable terminal reason codes (docs/recovery.md explains each)."""

    EXITED = "EXITED"
    CANCEL_REQUESTED = "CANCEL_REQUESTED"
    TIMEOUT = "TIMEOUT"
    CANCELLED_BEFORE_START = "CANCELLED_BEFORE_START"
    SPAWN_FAILED = "SPAWN_FAILED"
    SPAWN_HANDLE_PERSIST_FAILED = "SPAWN_HANDLE_PERSIST_FAILED"
    PROCESS_EXITED_WITHOUT_RECEIPT = "PROCESS_EXITED_WITHOUT_RECEIPT"
    RECOVERY_PROCESS_EXITED_WITHOUT_RECEIPT = "RECOVERY_PROCESS_EXITED_WITHOUT_RECEIPT"
    RECOVERY_SPAWN_UNCONFIRMED = "RECOVERY_SPAWN_UNCONFIRMED"
    # Found `preparing` after the machine rebooted since spawn step 1 (its boot id,
    # migration 0024): the launcher may have started, and the task run, before a power
    # loss took it with its receipt and its identity commit (docs/contract.md).
    RECOVERY_SPAWN_BEFORE_REBOOT = "RECOVERY_SPAWN_BEFORE_REBOOT"
    RECOVERY_IDENTITY_MISMATCH = "RECOVERY_IDENTITY_MISMATCH"
    RECOVERY_IDENTITY_MISSING = "RECOVERY_IDENTITY_MISSING"
    RECOVERY_BOOT_CHANGED = "RECOVERY_BOOT_CHANGED"
    RECOVERY_IDENTITY_UNSUPPORTED = "RECOVERY_IDENTITY_UNSUPPORTED"
    RECOVERY_FOREIGN_OWNER = "RECOVERY_FOREIGN_OWNER"
    # An attempt still `preparing` under a run that had already ended: what a cancel
    # that raced the spawn left behind before the run turned `running` at spawn step 1
    # (docs/recovery.md); decided from its receipt when there is one, else this.
    RECOVERY_RUN_ALREADY_ENDED = "RECOVERY_RUN_ALREADY_ENDED"
    TASK_ISOLATION_UNAVAILABLE = "TASK_ISOLATION_UNAVAILABLE"
    # Spawn step 1 could not be written for this run (a stored value out of range, say):
    # it ends `failed` with no attempt, and the round goes on with the other runs.
    SPAWN_PREPARE_FAILED = "SPAWN_PREPARE_FAILED"
    # The `task` command form refused before any process (taskform.py, docs/tasks.md).
    TASK_BAD_SYNTAX = "TASK_BAD_SYNTAX"
    TASK_BAD_OPTION = "TASK_BAD_OPTION"
    TASK_BAD_SELECTION = "TASK_BAD_SELECTION"
    TASK_PATH_OUTSIDE = "TASK_PATH_OUTSIDE"
    TASK_SCRIPT_NOT_FOUND = "TASK_SCRIPT_NOT_FOUND"
    TASK_SCRIPT_NOT_EXECUTABLE = "TASK_SCRIPT_NOT_EXECUTABLE"
    TASK_INTERPRETER_MISSING = "TASK_INTERPRETER_MISSING"
    TASK_ENV_EMPTY = "TASK_ENV_EMPTY"
    # A `task … conc` parent: its result is its children's (docs/tasks.md).
    CONC_CHILDREN = "CONC_CHILDREN"
    # Fleet mode (docs/fleet.md): the owning node's lease ran out and another node
    # took it over; the attempt is `lost` (a late receipt is recorded, not applied).
    NODE_LEASE_EXPIRED = "NODE_LEASE_EXPIRED"


class Concurrency(enum.StrEnum):
    """The pre-issue-20 spelling of the overlap policy, kept for API clients:
    forbid <=> any overlap but allow."""

    FORBID = "forbid"
    ALLOW = "allow"


class Overlap(enum.StrEnum):
    """What a new run of a task does while one of it is still active (docs/tasks.md)."""

    SKIP = "skip"  # no new run; the skip is an event on the active one
    QUEUE = "queue"  # wait behind it; at most one waiting run
    REPLACE = "replace"  # cancel the active one (fenced cancel), then start
    ALLOW = "allow"  # run side by side, bounded by the global limit


# Outcomes a task may retry on; `cancelled` (and `blocked`) never retry.
RETRYABLE = frozenset({"failed", "timed_out", "lost"})
DEFAULT_RETRY_ON = ("failed", "lost")
CHAIN_FIELDS = ("on_success", "on_failure", "on_finish")


class Task(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    num: int
    name: str
    command: str
    schedule: str | None
    timeout_s: int | None
    env: dict[str, str]
    enabled: bool
    concurrency: Concurrency
    labels: list[str]
    created_at_ms: int
    updated_at_ms: int
    version: int
    # Retention overrides (docs/retention.md): None = the settings' value, 0 = no limit.
    keep_runs: int | None = None
    keep_days: int | None = None
    # Leave what the command started in the background running when it exits
    # (daemons); by default the launcher ends it (docs/tasks.md).
    keep_background: bool = False
    overlap: Overlap = Overlap.SKIP
    # Retries (docs/tasks.md): attempts after the first, the first backoff, and
    # which outcomes retry.
    retries: int = 0
    retry_delay_s: int = 10
    retry_on: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_RETRY_ON))
    # Chains: task ids to trigger when a run of this task ends that way (docs/tasks.md).
    on_success: list[str] = []
    on_failure: list[str] = []
    on_finish: list[str] = []
    # More schedule forms: further cron expressions, and the zone they tick in
    # (None: the container's TZ).
    extra_schedules: list[str] = []
    tz: str | None = None
    # Where its runs may execute in a fleet (docs/fleet.md): a node name and labels
    # a node must all carry; None / [] = any node. Copied onto each run at creation.
    placement_node: str | None = None
    placement_labels: list[str] = []
    # The panel's debug Run of a script: not listed by default (docs/scripts.md#run).
    hidden: bool = False

    @property
    def schedules(self) -> list[str]:
        return ([self.schedule] if self.schedule else []) + self.extra_schedules


class Run(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    task_id: str
    trigger: Trigger
    status: RunStatus
    version: int
    event_seq: int
    cancel_reason: CancelReason | None
    cancel_requested_at_ms: int | None
    created_at_ms: int
    started_at_ms: int | None
    finished_at_ms: int | None
    exit_code: int | None
    reason_code: str | None
    not_before_ms: int | None = None  # queued, but not to start before this time
    # A child run of `task … conc` (docs/tasks.md): its parent, and the 1-based
    # position of its value in the parent's variable.
    parent_run_id: str | None = None
    conc_index: int | None = None
    # The task's placement when the run was created (docs/fleet.md).
    placement_node: str | None = None
    placement_labels: list[str] = []


class Attempt(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    run_id: str
    attempt_no: int
    executor_type: str
    runtime_owner: str
    status: AttemptStatus
    callback_token_hash: bytes
    callback_sequence: int
    log_path: str
    pid: int | None
    proc_start_time: int | None
    boot_id: str | None
    exit_code: int | None
    reason_code: str | None
    created_at_ms: int
    started_at_ms: int | None
    finished_at_ms: int | None
    deadline_at_ms: int | None
    # The log's length when the command exited, from the receipt (None: no receipt,
    # or a launcher that did not say). A shorter log file was cut by a power loss.
    log_bytes_at_exit: int | None = None
    # Fleet mode: the owner's lease epoch when it was prepared (None on SQLite), and a
    # receipt that came after the attempt was decided under a newer epoch: recorded,
    # never applied (COMPLETION_STALE_EPOCH, docs/fleet.md).
    node_epoch: int | None = None
    late_exit_code: int | None = None
    late_finished_at_ms: int | None = None
    # The machine's boot id at spawn step 1 (migration 0024; None on older attempts):
    # a `preparing` attempt of an earlier boot may have run before the machine went down.
    spawn_boot_id: str | None = None


class Event(msgspec.Struct, frozen=True, kw_only=True):
    """A low-sensitivity fact: never a command, env value, secret or output."""

    run_id: str
    seq: int
    type: str
    at_ms: int
    attempt_id: str | None = None
    data: dict[str, str | int | None] = {}


class NewEvent(msgspec.Struct, frozen=True, kw_only=True):
    """An event before the store assigns its per-run sequence number."""

    type: str
    attempt_id: str | None = None
    data: dict[str, str | int | None] = {}
