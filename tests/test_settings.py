from __future__ import annotations

from pathlib import Path

import pytest

from qledge import settings


def test_defaults_are_edge() -> None:
    s = settings.load({})
    assert s.profile == "edge"
    assert s.port == 5700
    assert s.data_path == Path("./var/data").absolute()


def test_profile_numbers() -> None:
    edge = settings.load({}).profile_limits
    assert (edge.round_interval_s, edge.pages, edge.page_size, edge.publish_grace_ms) == (
        30.0, 2, 8, 50)
    assert (edge.journal_retention_s, edge.quarantine_retention_s) == (120.0, 300.0)
    sa = settings.load({"QLEDGE_PROFILE": "standalone"}).profile_limits
    assert (sa.round_interval_s, sa.pages, sa.page_size, sa.publish_grace_ms) == (5.0, 4, 32, 100)
    assert (sa.journal_retention_s, sa.quarantine_retention_s) == (60.0, 3600.0)
    assert sa.max_concurrent_attempts > edge.max_concurrent_attempts >= 1


def test_unknown_env_key_names_it() -> None:
    with pytest.raises(settings.SettingsError, match="QLEDGE_PROFLE"):
        settings.load({"QLEDGE_PROFLE": "edge"})


def test_unknown_toml_key_names_it(tmp_path: Path) -> None:
    cfg = tmp_path / "q.toml"
    cfg.write_text('profile = "edge"\nprot = 80\n')
    with pytest.raises(settings.SettingsError, match="prot"):
        settings.load({"QLEDGE_CONFIG": str(cfg)})


def test_toml_then_env_override(tmp_path: Path) -> None:
    cfg = tmp_path / "q.toml"
    cfg.write_text('profile = "standalone"\nport = 8080\n')
    s = settings.load({"QLEDGE_CONFIG": str(cfg), "QLEDGE_PORT": "9090"})
    assert (s.profile, s.port) == ("standalone", 9090)


@pytest.mark.parametrize("name", ["cluster-control", "cluster-worker"])
def test_cluster_profiles_refused(name: str) -> None:
    with pytest.raises(settings.SettingsError, match="needs QLEDGE_DATABASE_URL"):
        settings.load({"QLEDGE_PROFILE": name})


def test_bad_values_refused() -> None:
    with pytest.raises(settings.SettingsError, match="profile"):
        settings.load({"QLEDGE_PROFILE": "tiny"})
    with pytest.raises(settings.SettingsError, match="port"):
        settings.load({"QLEDGE_PORT": "eighty"})


@pytest.mark.parametrize("token", ["a", "x" * 31, " " + "x" * 32, "x" * 32 + "\n"])
def test_weak_admin_tokens_are_refused(token: str) -> None:
    with pytest.raises(settings.SettingsError, match="at least 32 characters"):
        settings.load({"QLEDGE_ADMIN_TOKEN": token})


def test_a_strong_admin_token_and_none_are_accepted() -> None:
    assert settings.load({"QLEDGE_ADMIN_TOKEN": "x" * 32}).admin_token == "x" * 32
    assert settings.load({}).admin_token == ""  # generated at start-up


def test_serve_exits_at_once_naming_the_token_rule(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("QLEDGE_")}
    env.update(QLEDGE_STATE_DIR=str(tmp_path / "state"), QLEDGE_ADMIN_TOKEN="a",
               QLEDGE_HOST="127.0.0.1", QLEDGE_PORT="1")
    res = subprocess.run([sys.executable, "-m", "qledge", "serve"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert "QLEDGE_ADMIN_TOKEN is too weak" in res.stderr
    assert "at least 32 characters" in res.stderr


def test_a_weak_token_handed_over_in_a_file_is_refused(tmp_path: Path) -> None:
    """QLEDGE_ADMIN_TOKEN_FILE (how the image hands QLEDGE_ADMIN_TOKEN to the worker)
    gets the same rule as the variable."""
    secret = tmp_path / "admin.token"
    secret.write_text("short-token-0123456789\n")
    with pytest.raises(settings.SettingsError,
                       match=r"QLEDGE_ADMIN_TOKEN_FILE .* is too weak.*at least 32 characters"):
        settings.load({"QLEDGE_ADMIN_TOKEN_FILE": str(secret)})
    secret.write_text("x" * 32 + "\n")
    assert settings.load({"QLEDGE_ADMIN_TOKEN_FILE": str(secret)}).admin_token == "x" * 32


def test_a_short_token_file_is_refused(tmp_path: Path) -> None:
    from qledge import paths

    conf = settings.load({"QLEDGE_STATE_DIR": str(tmp_path)})
    paths.prepare_roots(conf)
    (conf.data_path / "secrets" / "admin.token").write_text("short-token-0123456789\n")
    with pytest.raises(paths.RootError, match="fewer than 32"):
        paths.admin_token(conf)

