"""docs/contract.md is the one home of the contract, and the code cites it."""

from __future__ import annotations

import re
from pathlib import Path

from qledge.model import Reason
from qledge.receipts.codec import ReceiptReason
from qledge.runtime.completion import Rejection
from qledge.runtime.consumer import ATTEMPT_MISMATCH

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "docs" / "contract.md"
# Files whose text the project writes (not the venv, builds or caches).
SOURCES = ("app", "docs", "image", "rootfs", "scripts", "tests", "buildx", ".ci")
TOP = ("README.md", "Containerfile", "compose.yaml", "pyproject.toml")
# Applied migrations are checksummed (docs/storage.md): their old comments stay.
CHECKSUMMED = re.compile(r"app/qledge/db/migrations/\d{4}_\w+\.sql")


def _texts() -> dict[str, str]:
    files = [ROOT / name for name in TOP]
    for top in SOURCES:
        files += [p for p in (ROOT / top).rglob("*") if p.is_file()
                  and "__pycache__" not in p.parts and p.suffix not in (".png", ".pyc")]
    out = {}
    for path in files:
        try:
            out[path.relative_to(ROOT).as_posix()] = path.read_text("utf-8")
        except (UnicodeDecodeError, FileNotFoundError):
            continue
    return out


def _table_codes(text: str) -> set[str]:
    """Codes named in the first cell of a table row: | `CODE` | ..."""
    return set(re.findall(r"^\| `([A-Z0-9_]+)` \|", text, flags=re.MULTILINE))


def test_every_reason_code_is_in_a_table_of_the_contract() -> None:
    documented = _table_codes(CONTRACT.read_text("utf-8"))
    codes = ({r.value for r in Reason} | {r.value for r in ReceiptReason}
             | {r.value for r in Rejection} | {ATTEMPT_MISMATCH})
    assert codes - documented == set(), "codes without a meaning in docs/contract.md"
    assert documented - codes == set(), "docs/contract.md explains codes nothing produces"


def test_no_citation_of_documents_outside_the_repository() -> None:
    # Split so this file does not match itself.
    outside = re.compile("SP" + r"EC\s*§|ADR-" + "0007")
    found = [f"{path}:{text[:m.start()].count(chr(10)) + 1}"
             for path, text in _texts().items() if not CHECKSUMMED.fullmatch(path)
             for m in outside.finditer(text)
             if path != "docs/contract.md" or "migrations 0001" not in text[m.start() - 80:m.end()]]
    assert found == []


def test_every_contract_citation_names_a_section_that_exists() -> None:
    sections = set(re.findall(r"^## §(\d+) ", CONTRACT.read_text("utf-8"), flags=re.MULTILINE))
    assert sections == {str(n) for n in range(1, 12)}
    cited: set[str] = set()
    for path, text in _texts().items():
        for m in re.finditer(r"contract\.md`?\s+§(\d+)(?:\s*-\s*§(\d+))?", text):
            cited.update(n for n in m.groups() if n)
            assert all(n in sections for n in m.groups() if n), f"{path}: {m.group(0)}"
    assert len(cited) >= 5  # the code does cite it
