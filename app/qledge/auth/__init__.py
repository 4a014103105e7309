"""The panel's sign-in (docs/security.md): password (scrypt), TOTP, sessions, back-off."""

from .account import Accounts, State, agent_summary
from .errors import (
    AuthRefused,
    BadCredentials,
    CurrentRequired,
    NoEnrolment,
    PasswordNotSet,
    Throttled,
    TotpRequired,
)
from .password import WeakPassword

__all__ = ["Accounts", "AuthRefused", "BadCredentials", "CurrentRequired", "NoEnrolment",
           "PasswordNotSet", "State", "Throttled", "TotpRequired", "WeakPassword",
           "agent_summary"]
