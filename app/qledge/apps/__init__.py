"""OpenAPI apps (QingLong's "应用设置"): scopes, names and credentials (`spec.py`)."""
