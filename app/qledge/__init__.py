"""qledge: a task-runner appliance whose runs survive control-plane restarts."""

from __future__ import annotations

# The one place of the version: scripts/version reads this line for the image,
# the launcher and the packaging metadata.
__version__ = "0.1.0"
