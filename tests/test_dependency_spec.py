"""Package specs, derived statuses and mirror redaction (app/qledge/dependencies/spec.py)."""

from __future__ import annotations

import pytest

from qledge.dependencies.spec import (
    SpecError,
    node_package,
    python_package,
    qinglong_status,
    redact,
    redact_url,
    secrets_of,
    status,
)


@pytest.mark.parametrize(("raw", "name", "spec"), [
    ("requests", "requests", "requests"),
    ("  requests==2.32.3 ", "requests", "requests==2.32.3"),
    ("Foo_Bar.baz>=1.0, <2", "foo-bar-baz", "Foo_Bar.baz>=1.0,<2"),
    ("httpx[http2, brotli]~=0.27", "httpx", "httpx[http2,brotli]~=0.27"),
    ("pkg===1.0+local", "pkg", "pkg===1.0+local"),
    ("pkg!=1.*", "pkg", "pkg!=1.*"),
])
def test_python_specs(raw: str, name: str, spec: str) -> None:
    got = python_package(raw)
    assert (got.name, got.spec) == (name, spec)


@pytest.mark.parametrize("raw", [
    "-r requirements.txt", "--extra-index-url=x", "pkg @ https://x/p.whl", "pkg; os_name=='nt'",
    "./dir", "/abs/path.whl", "git+https://h/r", "pkg==1 2", "pkg|id", "pkg`id`", "pkg==",
    "pkg[", "ünï", "a\nb", "pkg==1.0\x00",
])
def test_python_specs_refused(raw: str) -> None:
    with pytest.raises(SpecError):
        python_package(raw)


@pytest.mark.parametrize(("raw", "name", "spec"), [
    ("axios", "axios", "axios"),
    ("axios@1.7.2", "axios", "axios@1.7.2"),
    ("axios@^1", "axios", "axios@^1"),
    ("@scope/pkg", "@scope/pkg", "@scope/pkg"),
    ("@scope/pkg@latest", "@scope/pkg", "@scope/pkg@latest"),
    ("lodash@>=4.0.0 <5", "lodash", "lodash@>=4.0.0 <5"),
    ("JSONStream@1", "JSONStream", "JSONStream@1"),
])
def test_node_specs(raw: str, name: str, spec: str) -> None:
    got = node_package(raw)
    assert (got.name, got.spec) == (name, spec)


@pytest.mark.parametrize("raw", [
    "github:user/repo", "user/repo", "file:../x", "axios@file:../x", "axios@http://h/a.tgz",
    "git+ssh://h/r", "@scope", "@/x", "axios@", "axios@-1", "--save-dev", "a;b", "a$(b)",
    "axios@1;id", "x" * 215,
])
def test_node_specs_refused(raw: str) -> None:
    with pytest.raises(SpecError):
        node_package(raw)


def test_status_is_derived_from_the_run_and_the_action() -> None:
    assert [status("install", s) for s in ("queued", "running", "succeeded", "failed",
                                           "timed_out", "lost", "blocked", "cancelled")] == [
        "queued", "installing", "installed", "failed", "failed", "failed", "failed",
        "cancelled"]
    assert [status("remove", s) for s in ("queued", "running", "succeeded", "failed")] == [
        "queued", "removing", "removed", "failed"]
    assert status("install", None) == "unknown"
    # QingLong's numbers: installFailed vs removeFailed say which way it failed.
    assert qinglong_status("install", "failed") == 2
    assert qinglong_status("remove", "failed") == 5
    assert qinglong_status("install", "installed") == 1
    assert qinglong_status("remove", "queued") == 6


def test_credentials_are_redacted_in_urls_and_in_output() -> None:
    url = "https://alice:p%40ss-w0rd@mirror.example/simple/"
    assert redact_url(url) == "https://***@mirror.example/simple/"
    assert redact_url("https://mirror.example/simple/") == "https://mirror.example/simple/"
    assert redact_url("") == ""
    secrets = secrets_of([url, "", "https://nobody.example/"])
    assert "p%40ss-w0rd" in secrets and "p@ss-w0rd" in secrets
    line = "Looking in indexes: https://alice:****@mirror.example/simple/ (p@ss-w0rd)"
    assert redact(line, secrets) == "Looking in indexes: https://***@mirror.example/simple/ (***)"
    assert redact("npm http fetch GET 200 https://tok@reg.example/x", []) == \
        "npm http fetch GET 200 https://***@reg.example/x"
