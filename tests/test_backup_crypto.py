"""backup/crypto.py: the encrypted archive's stream (docs/backup.md, "Encryption"):
sealed and opened in bounded chunks, a wrong passphrase, tampering, reordering and
truncation refused with their own codes; the CLI and verify with a passphrase."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from qledge import backup, paths, settings
from qledge.backup import crypto

from support import ROOT, migrate_for

PW = b"correct horse battery"


def _seal(plain: bytes, pw: bytes = PW, pieces: int = 7) -> bytes:
    out = io.BytesIO()
    w = crypto.EncryptingWriter(out, pw)
    step = max(len(plain) // pieces, 1)
    for i in range(0, len(plain), step):
        w.write(plain[i:i + step])
    w.finish()
    return out.getvalue()


def _open(sealed: bytes, pw: bytes = PW) -> bytes:
    return crypto.opened(io.BufferedReader(io.BytesIO(sealed)), pw).read()


@pytest.mark.parametrize("size", [0, 1, crypto.CHUNK - 1, crypto.CHUNK, crypto.CHUNK + 1,
                                  3 * crypto.CHUNK, 3 * crypto.CHUNK + 5])
def test_round_trip_at_every_chunk_boundary(size: int) -> None:
    plain = os.urandom(size)
    sealed = _seal(plain)
    assert sealed.startswith(crypto.MAGIC)
    if size >= 16:  # a shorter one may turn up by chance
        assert plain[:16] not in sealed
    assert len(sealed) == crypto.HEADER + size + crypto.TAG * (size // crypto.CHUNK + 1) - (
        crypto.TAG if size and size % crypto.CHUNK == 0 else 0)
    assert _open(sealed) == plain


def test_a_wrong_passphrase_is_told_apart_from_damage() -> None:
    sealed = _seal(os.urandom(1000))
    with pytest.raises(backup.BackupInvalid) as err:
        _open(sealed, b"wrong horse battery")
    assert err.value.code == "BACKUP_PASSPHRASE_WRONG"


@pytest.mark.parametrize(("how", "code"), [
    ("flip", "BACKUP_ENCRYPTED_DAMAGED"), ("flip-last", "BACKUP_ENCRYPTED_TRUNCATED"),
    ("cut-at-chunk", "BACKUP_ENCRYPTED_TRUNCATED"), ("cut-mid", "BACKUP_ENCRYPTED_TRUNCATED"),
    ("swap", "BACKUP_ENCRYPTED_DAMAGED"), ("header", "BACKUP_PASSPHRASE_WRONG"),
    ("params", "BACKUP_ENCRYPTED_DAMAGED"),
])
def test_tampering_and_truncation_are_refused(how: str, code: str) -> None:
    plain = os.urandom(3 * crypto.CHUNK + 100)
    s = bytearray(_seal(plain))
    block = crypto.CHUNK + crypto.TAG
    if how == "flip":
        s[crypto.HEADER + 10] ^= 1
    elif how == "flip-last":
        s[-1] ^= 1
    elif how == "cut-at-chunk":
        s = s[:crypto.HEADER + 2 * block]
    elif how == "cut-mid":
        s = s[:-50]
    elif how == "swap":
        a, b = crypto.HEADER, crypto.HEADER + block
        s[a:a + block], s[b:b + block] = s[b:b + block], s[a:a + block]
    elif how == "header":
        s[len(crypto.MAGIC) + 3] ^= 1  # the salt: another key
    elif how == "params":
        s[len(crypto.MAGIC)] = 40  # N = 2^40: refused, never attempted
    with pytest.raises(backup.BackupInvalid) as err:
        _open(bytes(s))
    assert err.value.code == code


def test_passphrase_rules() -> None:
    with pytest.raises(backup.BackupInvalid) as err:
        crypto.check_passphrase("short")
    assert err.value.code == "BACKUP_PASSPHRASE_SHORT"
    with pytest.raises(backup.BackupInvalid) as err:
        _open(_seal(b"x"), None)  # type: ignore[arg-type]
    assert err.value.code == "BACKUP_PASSPHRASE_NEEDED"
    with pytest.raises(backup.BackupInvalid) as err:
        crypto.opened(io.BufferedReader(io.BytesIO(b"plain tar")), PW)
    assert err.value.code == "BACKUP_NOT_ENCRYPTED"


def test_the_panels_check_before_an_encrypted_download_uses_the_servers_minimum() -> None:
    """panel/backup.js checks the length in the page (a refused form POST would leave
    it for a JSON page): the same number as the server's."""
    text = (ROOT / "app/qledge/panel/backup.js").read_text()
    assert f"const MIN_PASSPHRASE = {crypto.MIN_PASSPHRASE};" in text


def _cli(conf: settings.Settings, *words: str, **env: str) -> subprocess.CompletedProcess[bytes]:
    full = {**os.environ, "QLEDGE_STATE_DIR": str(conf.state_dir),
            "QLEDGE_ADMIN_TOKEN": "x" * 40, **env}
    return subprocess.run([sys.executable, "-m", "qledge", "backup", *words], env=full,
                          capture_output=True, timeout=120, check=False)


def test_cli_encrypts_and_verify_needs_the_passphrase(
        conf: settings.Settings, tmp_path: Path) -> None:
    migrate_for(conf)
    paths.prepare_roots(conf)
    secret = b"cookie=pt_key=SECRET-IN-AN-ENV;"
    (conf.scripts_path / "a.py").write_bytes(secret * 100)
    pw_file = tmp_path / "pw"
    pw_file.write_text("correct horse battery\n")
    target = tmp_path / "b.tar.gz.enc"
    done = _cli(conf, "-o", str(target), "--passphrase-file", str(pw_file))
    assert done.returncode == 0, done.stderr
    data = target.read_bytes()
    assert data.startswith(crypto.MAGIC) and b"SECRET-IN-AN-ENV" not in data
    assert b"correct horse" not in done.stdout + done.stderr
    ok = _cli(conf, "verify", str(target), QLEDGE_BACKUP_PASSPHRASE="correct horse battery")
    assert ok.returncode == 0, ok.stderr
    assert b"encrypted, all checksums match" in ok.stdout
    with target.open("rb") as f:
        manifest = backup.verify(crypto.opened(f, PW))
    assert manifest.encrypted is True
    need = _cli(conf, "verify", str(target))
    assert need.returncode == 2 and b"BACKUP_PASSPHRASE_NEEDED" in need.stderr
    wrong = _cli(conf, "verify", str(target), QLEDGE_BACKUP_PASSPHRASE="wrong horse battery")
    assert wrong.returncode == 2 and b"BACKUP_PASSPHRASE_WRONG" in wrong.stderr
    short = _cli(conf, "-o", str(tmp_path / "x"), QLEDGE_BACKUP_PASSPHRASE="short")
    assert short.returncode == 2 and b"BACKUP_PASSPHRASE_SHORT" in short.stderr
    # Into a directory: an .enc name, rotation sees it as ours.
    d = tmp_path / "usb"
    d.mkdir()
    done = _cli(conf, "--to-dir", str(d), "--keep", "1",
                QLEDGE_BACKUP_PASSPHRASE="correct horse battery")
    assert done.returncode == 0, done.stderr
    (name,) = [p.name for p in d.iterdir() if p.name.startswith("qledge-backup-")]
    assert name.endswith(".tar.gz.enc")
    assert _cli(conf, "verify", str(d / name),
                QLEDGE_BACKUP_PASSPHRASE="correct horse battery").returncode == 0


def test_api_post_streams_an_encrypted_archive(conf: settings.Settings, client: TestClient,
                                               tmp_path: Path) -> None:
    paths.prepare_roots(conf)
    (conf.scripts_path / "a.py").write_bytes(b"SECRET-COOKIE " * 1000)
    r = client.post("/api/v1/backup", json={"passphrase": "short"})
    assert r.status_code == 422 and r.json()["error"] == "BACKUP_PASSPHRASE_SHORT"
    assert r.json()["field"] == "passphrase" and r.json()["params"] == {"min": 8}
    assert client.post("/api/v1/backup", json={"passphrase": "x" * 9, "extra": 1}
                       ).status_code == 422
    target = tmp_path / "dl.enc"
    with client.stream("POST", "/api/v1/backup",
                       json={"passphrase": "correct horse battery", "logs": True}) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-disposition"].endswith('.tar.gz.enc"')
        with target.open("wb") as out:
            for chunk in resp.iter_bytes():
                out.write(chunk)
    data = target.read_bytes()
    assert data.startswith(crypto.MAGIC) and b"SECRET-COOKIE" not in data
    with target.open("rb") as f:
        manifest = backup.verify(crypto.opened(f, PW))
    assert manifest.encrypted and manifest.with_logs
    assert "qledge-backup/scripts/a.py" in {m.name for m in manifest.members}


def test_the_panels_form_post_streams_the_same_encrypted_archive(
        conf: settings.Settings, client: TestClient, tmp_path: Path) -> None:
    """The panel's download form posts the JSON body's fields form-encoded: the same
    strict judgement, and an archive that opens with the (UTF-8) passphrase."""
    paths.prepare_roots(conf)
    (conf.scripts_path / "a.py").write_bytes(b"SECRET-COOKIE " * 1000)
    assert client.get("/api/v1/backup/estimate").json()["encryption"] is True
    form = {"Content-Type": "application/x-www-form-urlencoded"}

    def refused(body: str) -> dict[str, object]:
        r = client.post("/api/v1/backup", content=body, headers=form)
        assert 400 <= r.status_code < 500, (body, r.status_code)
        answer: dict[str, object] = r.json()
        return answer

    assert refused("passphrase=short")["error"] == "BACKUP_PASSPHRASE_SHORT"
    assert refused("passphrase=correct+horse&extra=1")["code"] == "UNKNOWN_FIELD"
    assert refused("passphrase=correct+horse&passphrase=other+horse")["code"] == "DUPLICATE_KEY"
    assert refused("passphrase=correct+horse&logs=on")["code"] == "WRONG_TYPE"
    assert refused("logs=1")["code"] == "MISSING_FIELD"
    assert refused("passphrase=%FF%FE")["code"] == "MALFORMED_FORM"
    assert refused("just-words")["code"] == "MALFORMED_FORM"
    pw = "口令 correct horse"
    target = tmp_path / "form.enc"
    body = "passphrase=%E5%8F%A3%E4%BB%A4+correct+horse&history=1"
    with client.stream("POST", "/api/v1/backup", content=body, headers=form) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-disposition"].endswith('.tar.gz.enc"')
        with target.open("wb") as out:
            for chunk in resp.iter_bytes():
                out.write(chunk)
    assert b"SECRET-COOKIE" not in target.read_bytes()
    with target.open("rb") as f:
        manifest = backup.verify(crypto.opened(f, pw.encode()))
    assert manifest.encrypted and manifest.with_history and not manifest.with_logs


def test_without_the_cipher_encryption_fails_clearly_and_plain_backups_work(
        conf: settings.Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Python whose hashlib has no shared libcrypto with AES-256-GCM: simulated by a
    process where finding the library fails."""
    migrate_for(conf)
    paths.prepare_roots(conf)
    probe = (
        "import sys\n"
        "from qledge.backup import aead\n"
        "def gone() -> str: raise aead.CipherUnavailable('no libcrypto here')\n"
        "aead._libcrypto_path = gone\n"
        "from qledge.cli.commands import main\n"
        "sys.exit(main(sys.argv[1:]))\n")
    env = {**os.environ, "QLEDGE_STATE_DIR": str(conf.state_dir),
           "QLEDGE_ADMIN_TOKEN": "x" * 40}

    def run(*words: str, **extra: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, "-c", probe, "backup", *words],
                              env={**env, **extra}, capture_output=True, timeout=120,
                              check=False)

    enc = run("-o", str(tmp_path / "b.enc"), QLEDGE_BACKUP_PASSPHRASE="correct horse battery")
    assert enc.returncode == 2 and b"BACKUP_ENCRYPTION_UNAVAILABLE" in enc.stderr
    assert not list(tmp_path.glob("b.enc*"))
    plain = run("-o", str(tmp_path / "b.tar.gz"))
    assert plain.returncode == 0, plain.stderr
    from qledge.backup import aead

    def gone() -> None:
        raise aead.CipherUnavailable("no libcrypto here")

    monkeypatch.setattr(aead, "_lib", gone)
    with pytest.raises(crypto.EncryptionUnavailable):
        crypto.require()
