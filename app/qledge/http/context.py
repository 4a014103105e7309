"""What an endpoint reads off its request besides the input: the runtime it serves."""

from __future__ import annotations

from starlette.requests import Request

from ..runtime.lifecycle import Runtime


def runtime_of(request: Request) -> Runtime:
    """The Runtime the app was built with (http/app.py puts it in app.state)."""
    rt: Runtime = request.app.state.runtime
    return rt
