"""What each built image is, measured inside it (tests/container/probe.py).

The 32-bit image is the point: arm/v7 runs Debian bookworm's armhf userland,
whose C time_t is 32-bit (CPython's fromtimestamp() raises past 2038-01-19
there; the probe shows it), while off_t is 64-bit. The app's own paths for
times after 2038 — receipt codec, SQLite store, cron, QingLong dates — and for
a log past 2 GiB must work on every arch all the same. Foreign arches run under
qemu-user here: sizes and the ABI are the target's, the kernel is the host's.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .test_container import _image, _require

pytestmark = [pytest.mark.drill, pytest.mark.slow]
PROBE = Path(__file__).with_name("probe.py")
AFTER_2038_MS = 2**31 * 1000 + 5
Y2100_MS = 4102444800000

EXPECT: dict[str, dict[str, Any]] = {
    "linux/amd64": {"machines": ("x86_64",), "pointer_bits": 64, "sizeof_time_t": 8,
                    "loop": "uvloop", "built_wheels": False, "asyncpg": True},
    "linux/arm64": {"machines": ("aarch64",), "pointer_bits": 64, "sizeof_time_t": 8,
                    "loop": "uvloop", "built_wheels": False, "asyncpg": True},
    # armv8l: an armhf userland on a 64-bit CPU whose kernel reports PER_LINUX32.
    "linux/arm/v7": {"machines": ("armv7l", "armv8l"), "pointer_bits": 32, "sizeof_time_t": 4,
                     "loop": "asyncio", "built_wheels": True, "asyncpg": False},
}


def probe(platform: str) -> dict[str, Any]:
    res = subprocess.run(
        ["/usr/bin/docker", "run", "--rm", "-i", "--platform", platform, "--network", "none",
         "--entrypoint", "/opt/qledge/venv/bin/python", _image(platform), "-"],
        input=PROBE.read_text(), capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("platform", list(EXPECT))
def test_image_abi_and_times_after_2038(platform: str) -> None:
    _require(platform)
    want = EXPECT[platform]
    got = probe(platform)
    print(json.dumps(got))  # the figures docs/image.md quotes (pytest -s)

    assert got["machine"] in want["machines"], got
    assert got["pointer_bits"] == want["pointer_bits"], got
    assert got["sizeof_time_t"] == want["sizeof_time_t"], got
    assert got["sizeof_off_t"] == 8, got  # CPython always builds with large-file support
    assert got["page_size"] in (4096, 16384, 65536), got
    # uvloop where the lock installs it, asyncio's own loop on arm/v7 (no wheel).
    assert got["loop"] == want["loop"], got
    assert got["built_wheels"] is want["built_wheels"], got
    # Fleet mode's driver where it has a wheel; arm/v7 has no fleet mode (docs/fleet.md).
    assert got["asyncpg"] is want["asyncpg"], got
    # The compiler stayed in the build stages.
    assert got["compilers"] == [] and got["python_headers"] is False, got
    assert got["pidfd_open"] == {"ok": True, "value": "ok"}, got

    # A 32-bit time_t is real there: the platform's own conversion fails...
    platform_dt = got["platform_fromtimestamp_2038"]
    if want["sizeof_time_t"] == 4:
        assert not platform_dt["ok"] and "OverflowError" in platform_dt["error"], got
    else:
        assert platform_dt["ok"], got
    # ...and the app's paths do not depend on it.
    assert got["receipt_after_2038"] == {"ok": True, "value": [AFTER_2038_MS, Y2100_MS]}, got
    assert got["store_after_2038"] == {"ok": True, "value": [Y2100_MS, Y2100_MS]}, got
    assert got["schedule_after_2038"]["ok"], got
    assert got["schedule_after_2038"]["value"][0].startswith("2100-01-01T12:00:00"), got
    iso, js_date = got["qinglong_dates_after_2038"]["value"]
    assert iso == "2100-01-01T00:00:00.000Z" and "2038" in js_date, got
    size = 3 * 2**30 + len(b"tail past 3 GiB\n")
    assert got["log_past_2gib"] == {"ok": True, "value": [size, size, 16]}, got
    assert got["heap_after_imports_kib"]["ok"] and got["heap_after_imports_kib"]["value"] > 1000
    # Backup encryption works on every image, arm/v7 included (docs/backup.md).
    assert got["aes_gcm"] == {"ok": True, "value": "cea7403d4d606b6e074ec5d3baf39d18"
                                                   "d0d1c8a799996bf0265b98b5d48ab919"}, got


# Uncompressed size budgets of the default images, in MB (10^6 bytes), as
# `docker images` counts them (docs/image.md, "Size").
SIZE_BUDGET_MB = {"linux/amd64": 120, "linux/arm64": 120, "linux/arm/v7": 100}


@pytest.mark.parametrize("platform", list(SIZE_BUDGET_MB))
def test_image_stays_within_its_size_budget(platform: str) -> None:
    _require(platform)
    size = int(subprocess.run(
        ["/usr/bin/docker", "image", "inspect", "-f", "{{.Size}}", _image(platform)],
        capture_output=True, text=True, check=True).stdout)
    assert size / 1e6 <= SIZE_BUDGET_MB[platform], (
        f"{_image(platform)} is {size / 1e6:.1f} MB, over its {SIZE_BUDGET_MB[platform]} MB "
        "budget: see docs/image.md, 'Size', for where the bytes go")


def test_image_has_no_package_manager_and_tasks_keep_their_tools() -> None:
    """The slimming took apt, dpkg and perl and left what scripts and the entrypoint use."""
    platform = "linux/amd64"
    _require(platform)
    script = (
        "for p in apt-get dpkg perl; do command -v $p && exit 1; done; "
        "for p in sh bash grep sed awk find tar gzip diff which hostname iconv getent "
        "setpriv usermod groupmod; do command -v $p >/dev/null || { echo missing $p; exit 1; }; "
        "done; "
        "test -s /var/lib/dpkg/status && ! grep -qx 'Package: perl-base' /var/lib/dpkg/status && "
        "for cs in GBK GB18030 BIG5 ISO-8859-15 CP1252; do "
        "printf 'ok' | iconv -f UTF-8 -t $cs >/dev/null || exit 1; done && "
        "python3 -c 'import ssl, sqlite3, json, zoneinfo, traceback; "
        "zoneinfo.ZoneInfo(\"Asia/Shanghai\"); import json.decoder as d; "
        "assert d.__file__.endswith(\".pyc\"), d.__file__' && echo fine")
    res = subprocess.run(
        ["/usr/bin/docker", "run", "--rm", "--network", "none", "--entrypoint", "/bin/sh",
         _image(platform), "-c", script], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip().endswith("fine"), (res.stdout, res.stderr)
