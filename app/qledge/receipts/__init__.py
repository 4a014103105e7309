"""Completion receipts: the evidence ql-launch leaves behind (docs/contract.md §4-§5).

A receipt is never a fact by itself; it becomes one when the CompletionService
consumes it in a transaction. This package only decodes it strictly and moves
files around safely inside the receipts root.
"""
