"""uvloop vs asyncio's own loop, side by side, inside an appliance image.

    scripts/bench loop [--platform linux/arm64]... [--rounds 3] [--scale 1]

The arm/v7 image has no uvloop (no wheel): its worker runs on asyncio's loop.
This prints what that costs, measured in the arm64 image (qemu here) and the
amd64 one, both loops in the same container, alternating, best of --rounds:

* call_soon: callbacks per second (the loop's own overhead);
* tcp echo: round trips per second over loopback with asyncio streams;
* http: GET requests per second to hypercorn + starlette (the worker's stack)
  from a keep-alive client on the same loop.

The host side (no argument `--inside`) runs the image with this file mounted;
the image side measures and prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TAGS = {"linux/amd64": "qledge:local-amd64", "linux/arm64": "qledge:local-arm64",
        "linux/arm/v7": "qledge:local-armv7"}


async def call_soon(n: int) -> float:
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    left = n

    def tick() -> None:
        nonlocal left
        left -= 1
        if left:
            loop.call_soon(tick)
        else:
            done.set_result(None)

    t0 = time.perf_counter()
    loop.call_soon(tick)
    await done
    return n / (time.perf_counter() - t0)


async def tcp_echo(n: int) -> float:
    async def echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while data := await r.read(256):
            w.write(data)
            await w.drain()
        w.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    t0 = time.perf_counter()
    for _ in range(n):
        writer.write(b"x" * 64)
        await reader.readexactly(64)
    rate = n / (time.perf_counter() - t0)
    writer.close()
    server.close()
    await server.wait_closed()
    return rate


async def http(n: int) -> float:
    from hypercorn.asyncio import serve
    from hypercorn.config import Config
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def ok(_: object) -> JSONResponse:
        return JSONResponse({"ok": True})

    app = Starlette(routes=[Route("/healthz", ok)])
    stop = asyncio.Event()
    bound: list[str] = []

    class _Config(Config):  # learns the port it bound (port 0: any free one)
        def create_sockets(self):  # type: ignore[no-untyped-def]
            sockets = super().create_sockets()
            bound.extend(f"{s.getsockname()[1]}" for s in sockets.insecure_sockets)
            return sockets

    cfg = _Config()
    cfg.bind, cfg.accesslog, cfg.errorlog = ["127.0.0.1:0"], None, None
    task = asyncio.create_task(serve(app, cfg, shutdown_trigger=stop.wait))  # type: ignore[arg-type]
    while not bound:
        await asyncio.sleep(0.01)
    reader, writer = await asyncio.open_connection("127.0.0.1", int(bound[0]))
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    t0 = time.perf_counter()
    for _ in range(n):
        writer.write(request)
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(11)  # {"ok":true}
    rate = n / (time.perf_counter() - t0)
    writer.close()
    stop.set()
    await task
    return rate


def inside(rounds: int, scale: float) -> dict[str, Any]:
    try:
        import uvloop
        factories: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
            "uvloop": uvloop.new_event_loop}
    except ImportError:
        factories = {}
    factories["asyncio"] = asyncio.new_event_loop
    sizes = {"call_soon": int(200_000 * scale), "tcp_echo": int(5_000 * scale),
             "http": int(1_000 * scale)}
    benches = {"call_soon": call_soon, "tcp_echo": tcp_echo, "http": http}
    best: dict[str, dict[str, float]] = {name: {} for name in factories}
    for _ in range(rounds):
        for name, factory in factories.items():  # alternating: same minutes for both
            for bench, fn in benches.items():
                with asyncio.Runner(loop_factory=factory) as runner:
                    rate = runner.run(fn(sizes[bench]))
                best[name][bench] = max(best[name].get(bench, 0.0), rate)
    import platform
    return {"machine": platform.machine(), "rounds": rounds, "n": sizes, "per_s": best}


def host(platform: str, rounds: int, scale: float) -> int:
    here = Path(__file__).resolve()
    res = subprocess.run(
        ["/usr/bin/docker", "run", "--rm", "--platform", platform, "--network", "none",
         "-v", f"{here}:/bench/loop.py:ro", "--entrypoint", "/opt/qledge/venv/bin/python",
         TAGS[platform], "/bench/loop.py", "--inside", "--rounds", str(rounds),
         "--scale", str(scale)], capture_output=True, text=True, check=False, timeout=1800)
    if res.returncode != 0:
        print(res.stderr[-3000:], file=sys.stderr)
        return 1
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    emu = "" if platform == "linux/amd64" else " (qemu-user: ratios, not absolute speed)"
    print(f"{platform} {doc['machine']}{emu}, best of {rounds}, per second")
    loops = list(doc["per_s"])
    print(f"  {'bench':<12}" + "".join(f"{name:>12}" for name in loops)
          + ("   uvloop/asyncio" if len(loops) == 2 else ""))
    for bench in doc["n"]:
        rates = [doc["per_s"][name][bench] for name in loops]
        ratio = f"   x{rates[0] / rates[1]:.2f}" if len(loops) == 2 else ""
        print(f"  {bench:<12}" + "".join(f"{r:>12,.0f}" for r in rates) + ratio)
    print(json.dumps(doc))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--platform", action="append")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--inside", action="store_true")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiplies the iteration counts (200k callbacks, 5k echoes, 1k GETs)")
    args = ap.parse_args()
    if args.inside:
        print(json.dumps(inside(args.rounds, args.scale)))
        return 0
    rc = 0
    for platform in args.platform or ["linux/arm64", "linux/amd64"]:
        rc |= host(platform, args.rounds, args.scale)
    return rc


if __name__ == "__main__":
    sys.exit(main())
