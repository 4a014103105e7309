"""What an OpenAPI app may be: its scopes, its name, its credentials (pure).

An app is a client_id/client_secret pair with scopes; only the secret's SHA-256 is
stored (it is 32 random bytes, so a plain hash is enough). The native API and the
QingLong importer apply the same rules.
"""

from __future__ import annotations

import hashlib
import secrets
import string

from .. import fields
from ..fields import FieldError
from ..limits import MAX_APP_NAME

SCOPES = ("crons", "envs", "logs", "scripts", "subscriptions", "dependencies")
# Scopes that amount to running code as the task user, with every env value in reach
# (docs/security.md, "What each scope reaches"): a task is arbitrary code (crons), so is
# a script (scripts), a subscription's hooks and repository (subscriptions), a package
# and the bin dir first on the tasks' PATH (dependencies), and the variables
# interpreters read as code (envs: NODE_OPTIONS, PYTHONWARNINGS, PATH…). Only `logs`
# is not: it reads what tasks printed.
RUNS_CODE = ("crons", "envs", "scripts", "subscriptions", "dependencies")
SCOPES_RUN_CODE = "SCOPES_RUN_CODE"
_ALNUM = string.ascii_letters + string.digits


def new_client_id() -> str:
    return "".join(secrets.choice(_ALNUM) for _ in range(12))


def new_secret() -> str:
    """32 random bytes, URL-safe text (also used for tokens)."""
    return secrets.token_urlsafe(32)


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def validated(name: str, scopes: list[str]) -> tuple[str, list[str]]:
    """The app's name (stripped) and its scopes (duplicates dropped, order kept)."""
    name = fields.text(name.strip(), "name", MAX_APP_NAME)
    if not name:
        raise FieldError("EMPTY", "name", f"name must be 1-{MAX_APP_NAME} characters",
                         max=MAX_APP_NAME)
    supported = ", ".join(SCOPES)
    if len(scopes) > 2 * len(SCOPES):
        raise FieldError("TOO_MANY", "scopes", f"scopes lists {len(scopes)} entries;"
                         f" supported: {supported}", max=2 * len(SCOPES))
    out: list[str] = []
    for scope in scopes:
        if scope not in SCOPES:
            raise FieldError("UNSUPPORTED", "scopes", f"unsupported scope {scope[:32]!r}"
                             f" (supported: {supported})", value=scope[:32])
        if scope not in out:
            out.append(scope)
    if not out:
        raise FieldError("EMPTY", "scopes", f"scopes must name at least one of: {supported}")
    return name, out
