"""The user-facing docs exist in 简体中文 too, and stay in step with the English.

Each English page in PAIRS has a Chinese counterpart. "In step" is checked on what
a translation must carry over unchanged, so an English edit that adds a command, a
setting, an API path or a section fails here until the Chinese page has it too:
the same headings per level, every fenced code block verbatim, every `QLEDGE_*`
name, every API path and every relative link target. And the counterpart must be
a translation: most of its prose is Chinese, and each page links to the other.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from support import ROOT

PAIRS = {
    "README.md": "README.zh-CN.md",
    "docs/tasks.md": "docs/zh/tasks.md",
    "docs/scripts.md": "docs/zh/scripts.md",
    "docs/notifications.md": "docs/zh/notifications.md",
    "docs/migrating-from-qinglong.md": "docs/zh/migrating-from-qinglong.md",
    "docs/backup.md": "docs/zh/backup.md",
    "docs/security.md": "docs/zh/security.md",
}
_FENCE = re.compile(r"^```[^\n]*\n.*?^```", re.MULTILINE | re.DOTALL)
_INDENTED = re.compile(r"(?:^(?: {4}|\t)\S[^\n]*\n)+", re.MULTILINE)
_HEADING = re.compile(r"^(#{1,6}) ", re.MULTILINE)
_SETTING = re.compile(r"\bQLEDGE_[A-Z0-9_]*[A-Z0-9]\b")
_API = re.compile(r"(?<![\w.])/(?:api/v1|open)/[A-Za-z0-9_{}/.-]*[A-Za-z0-9_}]")
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_LATIN_WORD = re.compile(r"[A-Za-z]{2,}")


def _text(rel: str) -> str:
    return (ROOT / rel).read_text("utf-8")


def _blocks(text: str) -> list[str]:
    return _FENCE.findall(text)


def _prose(text: str) -> str:
    """The text a translator translates: no code blocks, inline code or link targets."""
    text = _FENCE.sub("", text)
    text = _INDENTED.sub("", text)
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.sub(r"\]\([^)]*\)", "]", text)


def _targets(rel: str, text: str) -> set[str]:
    """Relative link targets, resolved from the page's folder, compared by name:
    an English page's docs/x.md may be the Chinese page's docs/zh/x.md."""
    out = set()
    for target in _LINK.findall(text):
        # Screenshots may differ by language (the Chinese page shows the 中文 ones).
        if "://" in target or target.startswith("mailto:") or target.endswith(".png"):
            continue
        resolved = (ROOT / rel).parent.joinpath(target).resolve()
        out.add(resolved.name if resolved.suffix == ".md" else
                resolved.relative_to(ROOT).as_posix())
    return out


@pytest.mark.parametrize("english", sorted(PAIRS))
def test_each_user_doc_has_a_chinese_counterpart_linked_both_ways(english: str) -> None:
    chinese = PAIRS[english]
    assert (ROOT / chinese).is_file(), f"{english} has no 中文 counterpart at {chinese}"
    en, zh = _text(english), _text(chinese)
    to_zh = Path(chinese).relative_to(Path(english).parent).as_posix() if \
        chinese.startswith(str(Path(english).parent)) else chinese
    back = "../" * (chinese.count("/") - english.count("/")) + Path(english).name
    assert f"]({to_zh})" in en[:400], f"{english} must link to {to_zh} at its top"
    assert f"]({back})" in zh[:400], f"{chinese} must link back to {back} at its top"


@pytest.mark.parametrize("english", sorted(PAIRS))
def test_the_chinese_page_is_a_translation(english: str) -> None:
    prose = _prose(_text(PAIRS[english]))
    cjk = len(_CJK.findall(prose))
    latin = len(_LATIN_WORD.findall(prose))
    # Product names, file names and English terms stay; most of the prose is Chinese.
    assert cjk > 4 * latin, f"{PAIRS[english]}: {cjk} Chinese characters, {latin} Latin words"


@pytest.mark.parametrize("english", sorted(PAIRS))
def test_the_chinese_page_keeps_the_english_structure(english: str) -> None:
    en, zh = _text(english), _text(PAIRS[english])
    levels = [len(m) for m in _HEADING.findall(_FENCE.sub("", en))]
    assert [len(m) for m in _HEADING.findall(_FENCE.sub("", zh))] == levels, \
        f"{PAIRS[english]}: headings differ in number or level from {english}"


@pytest.mark.parametrize("english", sorted(PAIRS))
def test_the_chinese_page_carries_every_command_setting_path_and_link(english: str) -> None:
    chinese = PAIRS[english]
    en, zh = _text(english), _text(chinese)
    missing_blocks = [b.splitlines()[1] if len(b.splitlines()) > 1 else b
                      for b in _blocks(en) if b not in zh]
    assert missing_blocks == [], f"{chinese} lacks these code blocks verbatim"
    assert set(_SETTING.findall(en)) - set(_SETTING.findall(zh)) == set()
    assert set(_API.findall(en)) - set(_API.findall(zh)) == set()
    pair = {Path(english).name, Path(chinese).name}
    assert _targets(english, en) - _targets(chinese, zh) - pair == set(), \
        f"{chinese} lacks links that {english} has"


def test_the_checks_catch_a_page_that_fell_behind() -> None:
    """The checks above fail on a counterpart missing a block, a setting or a path."""
    en = "# T\n\n```sh\nqledge run\n```\n\nSet `QLEDGE_WORK_DIR`, see `/api/v1/tasks`.\n"
    behind = "# T\n\n设置，见说明。\n"
    assert _blocks(en) and _blocks(en)[0] not in behind
    assert set(_SETTING.findall(en)) - set(_SETTING.findall(behind)) == {"QLEDGE_WORK_DIR"}
    assert set(_API.findall(en)) - set(_API.findall(behind)) == {"/api/v1/tasks"}
