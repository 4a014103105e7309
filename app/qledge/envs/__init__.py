"""Environment variables (QingLong "envs"): the rules their fields obey (`spec.py`)."""
