"""The panel's QR encoder (app/qledge/panel/qr.js) read back by a real decoder: zbarimg
(apt zbar-tools) must return the exact text for every version 1-10 and every mask."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from qledge.auth import totp
from qledge.http import panel

from support import unavailable

NODE = shutil.which("node")
ZBARIMG = shutil.which("zbarimg")


@pytest.fixture(autouse=True)
def _decoder() -> None:
    """A missing decoder skips here but fails under CI (scripts/bootstrap installs both):
    the QR promise is never left unproven there."""
    if NODE is None or ZBARIMG is None:
        unavailable("needs node and zbarimg (apt zbar-tools, scripts/bootstrap)")

# Renders each text's symbol as a PGM (4 px a module, a 4-module quiet zone).
RENDER = """
import { encodeQr } from '%s/qr.js';
import { writeFileSync } from 'node:fs';
const jobs = JSON.parse(process.argv[2]);
for (const [text, mask, out] of jobs) {
  const { size, dark, version } = encodeQr(text, mask);
  const s = 4, full = (size + 8) * s;
  const px = Buffer.alloc(full * full, 255);
  for (let y = 0; y < size; y++) for (let x = 0; x < size; x++) if (dark[y][x])
    for (let dy = 0; dy < s; dy++) for (let dx = 0; dx < s; dx++)
      px[((y + 4) * s + dy) * full + (x + 4) * s + dx] = 0;
  writeFileSync(out, Buffer.concat([Buffer.from(`P5\\n${full} ${full}\\n255\\n`), px]));
  console.log(version);
}
"""


def _decode(path: Path) -> str:
    out = subprocess.run([str(ZBARIMG), "-q", "--raw", str(path)], capture_output=True,
                         timeout=30, check=False)
    return out.stdout.decode().removesuffix("\n")


def test_every_version_and_mask_decodes(tmp_path: Path) -> None:
    uri = totp.uri(totp.new_secret(), account="admin")
    texts = [uri, "中文 密码 ✓"]
    # One text per version: the largest 1-M … 10-M holds in byte mode.
    capacity = [14, 26, 42, 62, 84, 106, 122, 152, 180, 213]
    texts += [("qledge-" * 40)[:n] for n in capacity]
    jobs = [[text, i % 8, str(tmp_path / f"{i}.pgm")] for i, text in enumerate(texts)]
    jobs += [[uri, mask, str(tmp_path / f"m{mask}.pgm")] for mask in range(8)]
    script = tmp_path / "render.mjs"
    script.write_text(RENDER % panel.PANEL_DIR.as_posix())
    versions = subprocess.run([str(NODE), str(script), json.dumps(jobs)], check=True,
                              capture_output=True, text=True, timeout=60).stdout.split()
    assert [int(v) for v in versions[2:12]] == list(range(1, 11))
    for text, _mask, out in jobs:
        assert _decode(Path(out)) == text
