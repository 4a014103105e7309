"""launch/simple_command.py: which commands run without a shell, checked against dash."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest

from qledge.launch.simple_command import DASH_BUILTINS, MAX_WORDS, RESERVED, exports, parse

SH = "/bin/sh"

ACCEPTED: list[tuple[str, list[str]]] = [
    ("python3 scripts/bot.py", ["python3", "scripts/bot.py"]),
    ("  node\ta.js  --x=1 ", ["node", "a.js", "--x=1"]),
    ("python3 -u 'my script.py' \"arg two\"", ["python3", "-u", "my script.py", "arg two"]),
    ("./run.sh a,b c:d e@f 100% +1 -- -", ["./run.sh", "a,b", "c:d", "e@f", "100%", "+1", "--",
                                          "-"]),
    ("python3 签到.py 京东", ["python3", "签到.py", "京东"]),
    # UTF-8 bytes 0x80-0x8f are dash's internal markers (CTLESC, CTLVAR, …): escaped
    ("x 耚聚肚胚脚腚膚臚舚艚芚苚茚荚莚菚 '脚' \"舚\"",
     ["x", "耚聚肚胚脚腚膚臚舚艚芚苚茚荚莚菚", "脚", "舚"]),
    ("/usr/bin/env", ["/usr/bin/env"]),
    ("tool ''", ["tool", ""]),
    ("tool \"\" x", ["tool", "", "x"]),
    ("a'b'\"c\"d", ["abcd"]),
    ("x 'a$b' '*' '~' '#x' '!' '{}' ';' '\\'", ["x", "a$b", "*", "~", "#x", "!", "{}", ";", "\\"]),
    ("x \"it's\" 'say \"hi\"'", ["x", "it's", 'say "hi"']),
    ("x \"*?[]~#{}!;&|<>()'\"", ["x", "*?[]~#{}!;&|<>()'"]),
    ("'/opt/my app/run' 1", ["/opt/my app/run", "1"]),
    ("ls --color=auto a=b", ["ls", "--color=auto", "a=b"]),
    ("x 'tab\there'", ["x", "tab\there"]),
    ("echo2 ok", ["echo2", "ok"]),
    ("..", [".."]),
    ("x ..", ["x", ".."]),
]

REFUSED = [
    "", "   ", "\t",
    # builtins and reserved words (quoted too: `'echo'` is still the builtin)
    "echo a", "printf x", "test -f x", "[ -f x ]", "true", "false", "cd x", "exit 3",
    "exec python3 x", ". x", ": x", "kill 1", "pwd", "'echo' a", "\"exit\" 3", "set -e",
    "if x", "time python3 x", "! x", "{ x", "for x", "while x", "function f", "select x",
    "[[ x", "command ls", "type ls", "ulimit -n", "umask 0", "wait", "read x", "local x",
    # assignments and `=` in the command name
    "FOO=1 python3 x.py", "A= x", "a=b", "'A'=b x", "x=",
    # operators, redirections, expansions, globs, comments, tilde, braces
    "a && b", "a || b", "a; b", "a;", "a | b", "a > f", "a >> f", "a < f", "a 2>&1", "a &",
    "(a)", "a (b)", "a $HOME", "a ${A}", "a $(b)", "a `b`", "a \\b", "a\\", "a *.py",
    "a ?", "a [x]", "a ]", "a ~/x", "a ~", "~/bin/x", "a x~", "a #c", "#c", "a b#c",
    "a {b,c}", "a }", "a !", "a ^x", "a \"$b\"", "a \"\\b\"", "a \"`b`\"", "a \"$\"",
    # unterminated quotes, line breaks and other control characters
    "a 'b", "a \"b", "a'", "a\nb", "a 'b\nc'", "a \"b\nc\"", "a\r", "a 'b\rc'", "a\x00b",
    "a\r\n", "a \\\n", "a 'b\n", "\n-x\n", "\n\n",
    "a '\x00'", "a \x0b", "a '\x1b'", "a\u00a0b", "a '\u200b'",
    # an empty command name
    "'' x", "\"\" x", "''",
    # a leading - or +: dash reads `sh -c "-x …"` as options
    "-x", "-x foo", "+x foo", "-", "--", "'-x' a", "\"+\"",
]


@pytest.mark.parametrize(("command", "argv"), ACCEPTED, ids=[c for c, _ in ACCEPTED])
def test_accepted(command: str, argv: list[str]) -> None:
    assert parse(command) == argv
    # The words are dash's own (the name is an argument here: no builtin lookup).
    assert dash_words(command) == argv


@pytest.mark.parametrize("command", [
    "/usr/bin/printf '%s|' a 'b c' \"d\"e\n",            # an editor's final newline
    "\n\n  /usr/bin/printf '%s|' a 'b c' \n\t\n",
    "/usr/bin/printf %s, 签到 ''",
], ids=repr)
def test_the_argv_runs_as_the_shell_ran_the_command(command: str) -> None:
    argv = parse(command)
    assert argv is not None and argv[0] == "/usr/bin/printf"
    direct = subprocess.run(argv, capture_output=True, check=True)
    shell = subprocess.run([SH, "-c", command], capture_output=True, check=True)
    assert direct.stdout == shell.stdout != b""


@pytest.mark.parametrize("command", REFUSED, ids=repr)
def test_refused(command: str) -> None:
    assert parse(command) is None


def test_every_dash_builtin_and_keyword_is_refused() -> None:
    """The lists against the shell on this machine: `command -V` names each one a
    builtin or keyword — and a name it does not call one is not in the builtin list."""
    for name in sorted(DASH_BUILTINS | RESERVED):
        assert parse(f"{name} x") is None
        assert parse(f"'{name}' x") is None
    for name in sorted(DASH_BUILTINS):
        what = subprocess.run([SH, "-c", 'command -V "$1"', SH, name], capture_output=True,
                              text=True).stdout
        assert "builtin" in what, (name, what)
    for name in ("ls", "python3", "env", "nohup"):
        what = subprocess.run([SH, "-c", 'command -V "$1"', SH, name], capture_output=True,
                              text=True).stdout
        assert "builtin" not in what and "keyword" not in what, (name, what)


def test_a_leading_dash_or_plus_is_an_option_to_sh() -> None:
    res = subprocess.run([SH, "-c", "-x foo"], capture_output=True, text=True)
    assert (res.returncode, "Illegal option" in res.stderr) == (2, True)


def test_too_many_words_keep_the_shell() -> None:
    assert parse("x " + "a " * (MAX_WORDS - 1)) == ["x", *["a"] * (MAX_WORDS - 1)]
    assert parse("x " + "a " * MAX_WORDS) is None


def test_random_commands_parse_as_dash_splits_them() -> None:
    """Any accepted string is split into exactly dash's words (fixed seed, so a failure
    is reproducible); the alphabet holds every character class the parser decides on."""
    alphabet = [*"ab=-./,:@%+_9 \t'\"$`\\*?[]~#{}!;&|<>()^\n签", "''", '""', "x=", "'$*'",
                '"a b"', "'\\'", '"#~"', "a", "b", " "]
    rng = random.Random(40)
    accepted = 0
    for _ in range(800):
        command = "x " + "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6)))
        argv = parse(command)
        if argv is None:
            continue
        accepted += 1
        assert dash_words(command) == argv, command
    assert accepted >= 100  # the sample really exercised the accepted side


def dash_words(command: str) -> list[str]:
    """The words dash gives a function called with `command`'s words as arguments."""
    res = subprocess.run([SH, "-c", "f() { printf '%s\\0' \"$@\"; }; f " + command],
                         capture_output=True, check=True)
    return [w.decode("utf-8", "surrogateescape") for w in res.stdout.split(b"\0")[:-1]]


# -- the environment -------------------------------------------------------------


def dash_env(env: dict[str, str], cwd: Path) -> dict[str, str]:
    res = subprocess.run([SH, "-c", "/usr/bin/env -0"], env=env, cwd=cwd, capture_output=True,
                         check=True)
    pairs = (e.decode().split("=", 1) for e in res.stdout.split(b"\0")[:-1])
    return {k: v for k, v in pairs}


def test_exports_are_what_dash_exports(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    base = {"PATH": "/usr/bin:/bin", "HOME": "/h", "LANG": "C.UTF-8"}
    cases = [
        base,
        {**base, "A-B": "1", "1X": "2", "a.b": "3", "GOOD_1": "4", "ü": "5"},
        {**base, "IFS": "x", "OPTIND": "5", "LINENO": "9", "PS1": "a", "SHLVL": "4"},
        {**base, "PS2": "b", "PS4": "c", "MAIL": "m", "MAILPATH": "p", "TERM": "t",
         "ENV": "e", "OLDPWD": "/o", "CDPATH": "/c", "OPTARG": "x", "HISTSIZE": "3",
         "_": "u", "FCEDIT": "f", "POSIXLY_CORRECT": "1"},
        {**base, "PWD": str(tmp_path / "link")},   # the same directory: kept
        {**base, "PWD": f"{real}/../real/"},       # ditto, with dots
        {**base, "PWD": str(tmp_path)},            # another directory: replaced
        {**base, "PWD": "real"},                   # relative: replaced
        {**base, "PWD": "/nonexistent"},
        {**base, "OLDPWD": "/o", "PATH": ""},
    ]
    for env in cases:
        assert exports(env, str(real)) == dash_env(env, real), env


def test_exports_that_cannot_be_known_before_the_launch_keep_the_shell() -> None:
    base = {"PATH": "/usr/bin:/bin"}
    assert exports({**base, "PPID": "1"}, "/") is None       # dash exports its parent's pid
    assert exports({"HOME": "/"}, "/") is None                # dash's default PATH is not musl's
    assert exports({"PATH": "/usr/bin:/opt%func"}, "/") is None   # `%`: an option to dash
    assert exports(base, "/") == {**base, "PWD": "/"}


def test_the_parser_is_pure() -> None:
    # No file system is read: a name that exists nowhere parses all the same.
    assert not os.path.exists("/nonexistent/ql-h40b")
    assert parse("/nonexistent/ql-h40b a") == ["/nonexistent/ql-h40b", "a"]
