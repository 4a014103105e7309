"""Operator audits: `qledge audit receipts` (receipts.py, with its bounded walk _walk.py),
read-only on the database, no runtime."""
