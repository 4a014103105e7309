"""Failed sign-ins back off, per client and for everyone (in memory: one worker).

Per client: the first `FREE` failures cost nothing; each one after doubles the wait,
from 1 s up to `CLIENT_CAP_S` (15 min). Globally: more than `GLOBAL_FREE` failures within
`GLOBAL_WINDOW_S` make every password attempt wait `GLOBAL_WAIT_S`, doubling while they
go on, up to `GLOBAL_CAP_S`. A success (and any sign-in with the admin token) clears
the client's count; the admin token is never throttled when right, so nobody is locked
out for good. A worker restart forgets the counts (docs/security.md).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

FREE = 3
CLIENT_CAP_S = 900.0
GLOBAL_FREE = 30
GLOBAL_WINDOW_S = 600.0
GLOBAL_WAIT_S = 2.0
GLOBAL_CAP_S = 300.0
MAX_CLIENTS = 4096


@dataclass
class _Client:
    failures: int = 0
    until_s: float = 0.0


@dataclass
class Throttle:
    clients: OrderedDict[str, _Client] = field(default_factory=OrderedDict)
    recent: list[float] = field(default_factory=list)
    global_until_s: float = 0.0
    global_level: int = 0

    def wait_s(self, client: str, now_s: float) -> float:
        """Seconds `client` must wait before its next attempt (0 = go ahead)."""
        entry = self.clients.get(client)
        mine = entry.until_s - now_s if entry else 0.0
        return max(0.0, mine, self.global_until_s - now_s)

    def failed(self, client: str, now_s: float) -> float:
        """Record a failure; returns the wait it sets for this client."""
        entry = self.clients.pop(client, None) or _Client()
        entry.failures += 1
        if entry.failures > FREE:
            entry.until_s = now_s + min(CLIENT_CAP_S, 2.0 ** (entry.failures - FREE - 1))
        self.clients[client] = entry
        while len(self.clients) > MAX_CLIENTS:
            self.clients.popitem(last=False)
        self.recent = [t for t in self.recent if t > now_s - GLOBAL_WINDOW_S]
        self.recent.append(now_s)
        if len(self.recent) > GLOBAL_FREE:
            self.global_level += 1
            wait = min(GLOBAL_CAP_S, GLOBAL_WAIT_S * 2.0 ** (self.global_level - 1))
            self.global_until_s = now_s + wait
        elif self.global_until_s <= now_s:
            self.global_level = 0
        return self.wait_s(client, now_s)

    def succeeded(self, client: str) -> None:
        self.clients.pop(client, None)

    def reset(self) -> None:
        """The admin token's reset: every count and the global back-off."""
        self.clients.clear()
        self.recent.clear()
        self.global_until_s = 0.0
        self.global_level = 0
