"""qledge: a task-runner appliance whose runs survive control-plane restarts."""

from __future__ import annotations

__version__ = "0.1.0"
