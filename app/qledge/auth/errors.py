"""Why a sign-in or an account change is refused (http/errors.py maps each to a status
and a stable code)."""

from __future__ import annotations


class AuthRefused(Exception):
    code = "SIGNIN_REFUSED"

    def __init__(self, message: str, *, retry_after_s: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s


class BadCredentials(AuthRefused):
    code = "SIGNIN_REFUSED"


class TotpRequired(AuthRefused):
    code = "TOTP_REQUIRED"


class Throttled(AuthRefused):
    code = "SIGNIN_THROTTLED"


class PasswordNotSet(AuthRefused):
    code = "PASSWORD_NOT_SET"


class CurrentRequired(AuthRefused):
    """A change that needs the current password (or the admin token) did not have it."""

    code = "CURRENT_PASSWORD_REQUIRED"


class NoEnrolment(AuthRefused):
    code = "TOTP_NOT_ENROLLING"
