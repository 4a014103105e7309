"""Script header parsing (qledge.scripts.meta): QingLong's formats, in QingLong's order."""

from __future__ import annotations

import time

import pytest

from qledge.scripts import meta as script_meta

JD_HEADER = """/*
京东种豆得豆
活动入口：京东APP我的-更多工具-种豆得豆
已支持IOS京东多账号,云端多京东账号
[task_local]
#京东种豆得豆
1 7-21/2 * * * jd_plantBean.js, tag=京东种豆得豆, img-url=https://x/y.png, enabled=true
================Loon==============
[Script]
cron "1 7-21/2 * * *" script-path=https://raw.example/jd_plantBean.js,tag=京东种豆得豆
===============Surge=================
京东种豆得豆 = type=cron,cronexp="1 7-21/2 * * *",script-path=jd_plantBean.js
*/
const $ = new Env('京东种豆得豆');
"""

SCHEDULES = [
    # (text, file name, schedule, source)
    ("// cron: 1 9 * * *\nconsole.log(1)", "a.js", "1 9 * * *", "cron_comment"),
    ("# cron: 0 0 9 * * *\nprint(1)", "a.py", "0 0 9 * * *", "cron_comment"),
    ("/*\n cron: 30  8,20 * * 1-5\n*/", "a.js", "30 8,20 * * 1-5", "cron_comment"),
    ('// cron: "15 6 * * *"', "a.js", "15 6 * * *", "cron_comment"),
    ("#!/bin/sh\n# cron：5 4 * * *", "a.sh", "5 4 * * *", "cron_comment"),  # full-width colon
    ('# cron "1 9 * * *"\nprint()', "a.py", "1 9 * * *", "cron_quoted"),
    ("// cron '*/30 * * * *' whatever", "a.js", "*/30 * * * *", "cron_quoted"),
    (JD_HEADER, "jd_plantBean.js", "1 7-21/2 * * *", "quantumult"),
    ("10 7 * * * https://raw.example/jd/jd_bean.js, tag=京豆", "jd_bean.js", "10 7 * * *",
     "quantumult"),
    ('cron "5 0 * * *" script-path=jd_bean.js,tag=x', "jd_bean.js", "5 0 * * *", "quantumult"),
    # QingLong drops a '*' glued to the first field inside a /* … */ block
    ("*10 7 * * * x.js", "x.js", "10 7 * * *", "quantumult"),
    # the line naming this file wins over a cron: line (QingLong's order)
    ("// cron: 0 1 * * *\n// 0 2 * * * me.js", "me.js", "0 2 * * *", "quantumult"),
    # a line naming ANOTHER file is not this script's schedule
    ("// 0 2 * * * other.js\n// cron: 0 1 * * *", "me.js", "0 1 * * *", "cron_comment"),
    ("// 0 2 * * * notme.js", "me.js", None, None),
    # an invalid candidate is skipped, the next valid one wins
    ("// cron: 61 9 * * *\n// cron: 1 9 * * *", "a.js", "1 9 * * *", "cron_comment"),
    ('// cron: 99 9 * * *\n# cron "1 2 * * *"', "a.js", "1 2 * * *", "cron_quoted"),
    ("// cron: every day", "a.js", None, None),
    ("// cron: 1 2 3", "a.js", None, None),  # too few fields
    ("const cron = require('cron'); // no schedule here", "a.js", None, None),
    ("", "a.js", None, None),
]


@pytest.mark.parametrize(("text", "file_name", "schedule", "source"), SCHEDULES)
def test_schedule_from_the_header(text: str, file_name: str, schedule: str | None,
                                  source: str | None) -> None:
    assert script_meta.schedule_of(text, file_name) == (schedule, source)


NAMES = [
    ("const $ = new Env('京东种豆得豆');", "a.js", "京东种豆得豆", "env"),
    ('const $ = new Env("Sign in");', "a.js", "Sign in", "env"),
    ("const $ = new Env(`tpl`);", "a.js", "tpl", "env"),
    ("const $ = new  Env ( 'spaced' )", "a.js", "spaced", "env"),
    ("# name: My bot\nprint()", "a.py", "My bot", "name_comment"),
    ("/*\n * name: 每日签到\n */", "a.js", "每日签到", "name_comment"),
    ("// name：'quoted'", "a.js", "quoted", "name_comment"),
    # Env wins over a name: line, as in QingLong
    ("// name: second\nconst $ = new Env('first');", "a.js", "first", "env"),
    # `name:` in code is not a header line
    ("const o = { name: 'x' };", "a.js", "a.js", "file"),
    ("const $ = new Env('');\nprint()", "b.py", "b.py", "file"),
    ("print()", "dir-less.py", "dir-less.py", "file"),
    ("// name: " + "n" * 300, "a.js", "n" * 200, "name_comment"),
]


@pytest.mark.parametrize(("text", "file_name", "name", "source"), NAMES)
def test_name_from_the_header(text: str, file_name: str, name: str, source: str) -> None:
    assert script_meta.name_of(text, file_name) == (name, source)


def test_parse_gives_the_task_command_for_the_path() -> None:
    meta = script_meta.parse(JD_HEADER, "owner_repo/jd_plantBean.js")
    assert meta == script_meta.ScriptMeta(
        schedule="1 7-21/2 * * *", schedule_from="quantumult", name="京东种豆得豆",
        name_from="env", command="task owner_repo/jd_plantBean.js")
    assert script_meta.parse("", "my script.js").command == "task 'my script.js'"
    assert script_meta.parse("", "it's.js").command == "task 'it'\"'\"'s.js'"


def test_only_the_header_is_scanned_and_long_lines_are_cheap() -> None:
    """A minified megabyte line or a schedule buried past the scan window is not read;
    a pathological line costs no regex backtracking blow-up."""
    far = "x\n" * (script_meta.MAX_SCAN // 2) + "// cron: 1 9 * * *\n"
    assert script_meta.schedule_of(far, "a.js") == (None, None)
    assert script_meta.schedule_of("1 " * 1000 + "a.js\n// cron: 2 9 * * *", "a.js") == (
        "2 9 * * *", "cron_comment")  # a line over MAX_LINE is skipped
    nasty = "".join(f"{'1,' * 900}1 a.js, {'*/' * 90}1 a.js\n" for _ in range(100))
    started = time.perf_counter()
    assert script_meta.schedule_of(nasty + "// cron: 2 9 * * *", "a.js") == (
        "2 9 * * *", "cron_comment")
    assert time.perf_counter() - started < 5


def test_every_returned_schedule_is_valid_cron() -> None:
    from qledge import cron

    for text, _, schedule, _ in SCHEDULES:
        if schedule:
            assert cron.validate(schedule) == schedule, text
