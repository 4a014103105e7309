"""The `qledge` command (`python -m qledge`): the parser and its dispatch (commands.py);
`serve` and the start-up order (serve.py), `migrate` (migrate.py), `import qinglong`
(import_qinglong.py), `task …` (task.py: QingLong's `task` for operators, an API client,
docs/tasks.md); the log set-up and the error line they share (output.py). `subscription
pull`, `deps apply` and `audit receipts` run their feature's own `main`."""

from .commands import main

__all__ = ["main"]
