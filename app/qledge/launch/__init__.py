"""Touching the processes and files of one attempt."""
