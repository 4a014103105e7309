"""File work through directory fds: never following a link, never overwriting (dirfd.py),
confined to one root (confined.py)."""
