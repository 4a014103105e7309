"""The `task` command form: parsing and expansion (taskform.py, docs/tasks.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from qledge.model import Reason
from qledge.taskform import (
    HOOK_RUNNER,
    MESSAGES,
    TaskForm,
    TaskFormError,
    conc_indexes,
    expand,
    indexes,
    is_task_form,
    parse,
    parse_duration,
    selected,
    split_values,
)

PATH = "/usr/local/bin:/usr/bin:/bin"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "scripts"
    (r / "owner_repo").mkdir(parents=True)
    for name in ("hello.py", "sign.js", "a.mjs", "b.cjs", "c.ts", "run.sh", "x.bash",
                 "owner_repo/jd_pet.js", "notes.txt"):
        (r / name).write_text("")
    (r / "tool").write_text("#!/bin/sh\n")
    (r / "tool").chmod(0o755)
    return r


def refused(reason: Reason, fn: object, *args: object) -> None:
    with pytest.raises(TaskFormError) as err:
        fn(*args)  # type: ignore[operator]
    assert err.value.reason is reason
    assert err.value.message == MESSAGES[reason]


def test_is_task_form() -> None:
    assert is_task_form("task a.js")
    assert is_task_form("  task\ta.js now")
    assert not is_task_form("tasks a.js")
    assert not is_task_form("echo task")
    assert not is_task_form("")


@pytest.mark.parametrize(("command", "form"), [
    ("task sign.js", TaskForm(path="sign.js", delayable=True)),
    ("task sign.js now", TaskForm(path="sign.js", now=True)),
    ("task -m 30m bot.py", TaskForm(path="bot.py", timeout_s=1800, delayable=True)),
    ("task bot.py now -m 1h", TaskForm(path="bot.py", now=True, timeout_s=3600)),
    ("task -m 1.5s a.sh now", TaskForm(path="a.sh", now=True, timeout_s=1.5)),
    ("task owner_repo/jd_pet.js desi JD_COOKIE 1-3 5",
     TaskForm(path="owner_repo/jd_pet.js", mode="desi", env_name="JD_COOKIE",
              selection=("1-3", "5"))),
    ("task a.js desi JD_COOKIE", TaskForm(path="a.js", mode="desi", env_name="JD_COOKIE")),
    ("task a.js conc JD_COOKIE 2 max -- --fast",
     TaskForm(path="a.js", mode="conc", env_name="JD_COOKIE", selection=("2", "max"),
              args=("--fast",))),
    ("task a.py -- -x 'two words' \"q\\\"d\"",
     TaskForm(path="a.py", args=("-x", "two words", 'q"d'), delayable=True)),
    ("task a.py now -- now", TaskForm(path="a.py", now=True, args=("now",))),
    ("task a.py one two", TaskForm(path="a.py", args=("one", "two"))),
    ("task /ql/data/scripts/owner_repo/x.js", TaskForm(path="owner_repo/x.js", delayable=True)),
    ("task /ql/scripts/x.js now", TaskForm(path="x.js", now=True)),
    ("task ./dir//x.js now", TaskForm(path="dir/x.js", now=True)),
    ("task 'my script.py' now", TaskForm(path="my script.py", now=True)),
])
def test_parse(command: str, form: TaskForm) -> None:
    assert parse(command) == form


def test_an_absolute_path_under_the_scripts_root_is_relative(tmp_path: Path) -> None:
    assert parse(f"task {tmp_path}/s/a.js now", tmp_path / "s").path == "a.js"
    refused(Reason.TASK_PATH_OUTSIDE, parse, f"task {tmp_path}/other/a.js", tmp_path / "s")


@pytest.mark.parametrize(("command", "reason"), [
    ("task", Reason.TASK_BAD_OPTION),
    ("task -l a.js", Reason.TASK_BAD_OPTION),
    ("task -m", Reason.TASK_BAD_OPTION),
    ("task -m 10m", Reason.TASK_BAD_OPTION),
    ("task -m 10x a.js", Reason.TASK_BAD_OPTION),
    ("task -m 0 a.js", Reason.TASK_BAD_OPTION),
    ("task -m 1m -m 2m a.js", Reason.TASK_BAD_OPTION),
    ("task a.js now extra", Reason.TASK_BAD_OPTION),
    ("task a.js desi", Reason.TASK_BAD_OPTION),
    ("task a.js desi 1-3", Reason.TASK_BAD_OPTION),
    ("task a.js --verbose", Reason.TASK_BAD_OPTION),
    ("task a.js desi X 1-a", Reason.TASK_BAD_SELECTION),
    ("task a.js desi X 0", Reason.TASK_BAD_SELECTION),
    ("task a.js conc X -1", Reason.TASK_BAD_SELECTION),
    ("task a.js desi X 1-5000", Reason.TASK_BAD_SELECTION),
    # Issue 35, finding 2: sizes that overflowed (len(range), the deadline) are refused.
    ("task a.js desi X 1-99999999999999999999", Reason.TASK_BAD_SELECTION),
    ("task a.js conc X 99999999999999999999-1", Reason.TASK_BAD_SELECTION),
    ("task a.js desi X 1234567890", Reason.TASK_BAD_SELECTION),
    ("task a.js desi X \u00b2", Reason.TASK_BAD_SELECTION),
    ("task a.js desi X " + "9" * 5000, Reason.TASK_BAD_SELECTION),
    ("task -m 99999999999999999999999d a.js now", Reason.TASK_BAD_OPTION),
    ("task -m " + "9" * 400 + " a.js", Reason.TASK_BAD_OPTION),
    ("task -m 367d a.js", Reason.TASK_BAD_OPTION),
    ("task -m 31622401 a.js", Reason.TASK_BAD_OPTION),
    ("task ../etc/passwd", Reason.TASK_PATH_OUTSIDE),
    ("task a/../../b.js", Reason.TASK_PATH_OUTSIDE),
    ("task /etc/passwd", Reason.TASK_PATH_OUTSIDE),
    ("task a.js; rm -rf /", Reason.TASK_BAD_SYNTAX),
    ("task a.js && b", Reason.TASK_BAD_SYNTAX),
    ("task a.js | tee x", Reason.TASK_BAD_SYNTAX),
    ("task a.js > out", Reason.TASK_BAD_SYNTAX),
    ("task a.js -- $HOME", Reason.TASK_BAD_SYNTAX),
    ("task a.js -- \"$HOME\"", Reason.TASK_BAD_SYNTAX),
    ("task a.js -- `id`", Reason.TASK_BAD_SYNTAX),
    ("task a.js -- 'unclosed", Reason.TASK_BAD_SYNTAX),
    ("task a.js \\", Reason.TASK_BAD_SYNTAX),
    ("task .", Reason.TASK_SCRIPT_NOT_FOUND),
])
def test_parse_refusals(command: str, reason: Reason) -> None:
    refused(reason, parse, command)


def test_quoted_operators_are_plain_text() -> None:
    assert parse("task a.js -- 'a;b|c' '$HOME' \\&").args == ("a;b|c", "$HOME", "&")


@pytest.mark.parametrize(("text", "seconds"), [
    ("30", 30), ("30s", 30), ("10m", 600), ("1h", 3600), ("2d", 172800), ("0.5m", 30),
    ("366d", 366 * 86400), ("31622400", 366 * 86400)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(("selection", "count", "picked"), [
    ((), 3, [1, 2, 3]),
    (("1-3", "5"), 6, [1, 2, 3, 5]),
    (("2~4",), 6, [2, 3, 4]),
    (("1_2",), 6, [1, 2]),
    (("3-max",), 5, [3, 4, 5]),
    (("max",), 4, [4]),
    (("3-1",), 5, [3, 2, 1]),
    (("2", "1-3", "2"), 5, [2, 1, 3]),
    (("7",), 3, [7]),
    (("1-1000",), 2, list(range(1, 1001))),
    (("999999999",), 2, [999999999]),
])
def test_selection_indexes(selection: tuple[str, ...], count: int, picked: list[int]) -> None:
    assert indexes(selection, count) == picked


def test_values_split_on_ampersand_as_qinglong_does() -> None:
    assert split_values("a&b&c") == ["a", "b", "c"]
    assert split_values("a&&c&") == ["a", "", "c"]
    assert split_values("") == []
    assert selected("a&b&c&d", ("1-2", "4")) == ["a", "b", "d"]
    assert selected("a&b", ("2", "9")) == ["b"]  # past the count: nothing, not ""
    refused(Reason.TASK_ENV_EMPTY, selected, None, ())
    refused(Reason.TASK_ENV_EMPTY, selected, "a&b", ("3",))


@pytest.fixture
def fake_bin(tmp_path: Path) -> str:
    """A PATH holding stand-ins for the three interpreters (expand only looks them up)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("python3", "node", "bash"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    return str(bin_dir)


@pytest.mark.parametrize(("path", "argv0"), [
    ("hello.py", "python3"), ("sign.js", "node"), ("a.mjs", "node"), ("b.cjs", "node"),
    ("c.ts", "node"), ("run.sh", "bash"), ("x.bash", "bash"),
])
def test_interpreter_by_extension(root: Path, path: str, argv0: str, fake_bin: str) -> None:
    spawn = expand(parse(f"task {path} now -- x"), root, {"PATH": fake_bin})
    assert spawn.argv == [argv0, path, "x"]
    assert spawn.cwd == str(root.resolve())


def test_the_script_runs_from_its_folder(root: Path, fake_bin: str) -> None:
    spawn = expand(parse("task owner_repo/jd_pet.js desi C 2"), root,
                   {"PATH": fake_bin, "C": "a&b"})
    assert spawn.argv == ["node", "jd_pet.js"]
    assert spawn.cwd == str((root / "owner_repo").resolve())
    assert spawn.env["C"] == "b"


def test_desi_keeps_only_the_selected_values(root: Path) -> None:
    env = {"PATH": PATH, "JD_COOKIE": "c1&c2&c3&c4&c5", "OTHER": "x"}
    spawn = expand(parse("task run.sh desi JD_COOKIE 1-2 4"), root, env)
    assert spawn.env == {**env, "JD_COOKIE": "c1&c2&c4"}
    assert env["JD_COOKIE"] == "c1&c2&c3&c4&c5"  # the caller's dict is not changed
    refused(Reason.TASK_ENV_EMPTY, expand, parse("task run.sh desi NOPE 1"), root, env)


def test_other_files_must_be_executable(root: Path) -> None:
    assert expand(parse("task tool now -- a"), root, {"PATH": PATH}).argv == ["./tool", "a"]
    refused(Reason.TASK_SCRIPT_NOT_EXECUTABLE, expand, parse("task notes.txt"), root,
            {"PATH": PATH})


def test_a_missing_interpreter_is_refused_before_spawn(root: Path, tmp_path: Path) -> None:
    refused(Reason.TASK_INTERPRETER_MISSING, expand, parse("task sign.js"), root,
            {"PATH": str(tmp_path)})


def test_missing_and_non_regular_scripts(root: Path) -> None:
    env = {"PATH": PATH}
    refused(Reason.TASK_SCRIPT_NOT_FOUND, expand, parse("task nope.py"), root, env)
    refused(Reason.TASK_SCRIPT_NOT_FOUND, expand, parse("task owner_repo"), root, env)
    os.mkfifo(root / "fifo.sh")
    refused(Reason.TASK_SCRIPT_NOT_FOUND, expand, parse("task fifo.sh"), root, env)


def test_symlinks_may_not_lead_outside(root: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.sh").write_text("")
    (root / "escape.sh").symlink_to(tmp_path / "outside.sh")
    (root / "inside.sh").symlink_to(root / "run.sh")
    refused(Reason.TASK_PATH_OUTSIDE, expand, parse("task escape.sh"), root, {"PATH": PATH})
    assert expand(parse("task inside.sh"), root, {"PATH": PATH}).argv == ["bash", "run.sh"]


def test_a_conc_child_gets_its_single_value(root: Path) -> None:
    form = parse("task run.sh conc X 2-3")
    env = {"PATH": PATH, "X": "a&b&c"}
    assert conc_indexes(env["X"], form.selection) == [2, 3]
    assert expand(form, root, env, conc_index=3).env["X"] == "c"
    # The variable lost values after the parent fanned out: that child is refused.
    refused(Reason.TASK_ENV_EMPTY, expand, form, root, {"PATH": PATH, "X": "a"}, 3)
    refused(Reason.TASK_ENV_EMPTY, conc_indexes, "a&b", ("5",))
    refused(Reason.TASK_BAD_SELECTION, conc_indexes, "&".join("v" * 101), ())
    assert len(conc_indexes("&".join("v" * 100), ())) == 100


def test_hooks_wrap_the_argv_only_when_present(root: Path) -> None:
    env = {"PATH": PATH}
    assert expand(parse("task run.sh now"), root, env).argv == ["bash", "run.sh"]
    (root / "task_after.sh").write_text("")
    spawn = expand(parse("task run.sh now -- 1"), root, env)
    assert spawn.argv == ["bash", "-c", HOOK_RUNNER, "task", "",
                          str(root.resolve() / "task_after.sh"), "run.sh", "bash", "run.sh",
                          "1"]


def test_every_refusal_has_a_fixed_message() -> None:
    assert set(MESSAGES) == {r for r in Reason if r.value.startswith("TASK_")
                             and r is not Reason.TASK_ISOLATION_UNAVAILABLE}
