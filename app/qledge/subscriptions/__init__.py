"""Subscriptions (docs/subscriptions.md): the spec a pull gets and its filters (spec.py,
pure), and the pull process run as a task (pull.py, fetching through _fetch.py)."""
