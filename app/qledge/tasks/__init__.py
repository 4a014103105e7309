"""Tasks: the rules a task's fields obey (`spec.py`), for both APIs and the importer."""
