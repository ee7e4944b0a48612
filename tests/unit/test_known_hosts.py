"""known_hosts parsing/matching/verification, ResolvedHost.known_hosts_name() and resolve_host()."""

from __future__ import annotations

import base64
import getpass
import hashlib
import hmac
import os
from pathlib import Path

import paramiko
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from sbxcheck.errors import HostKeyMismatch, HostKeyUnknown, InventoryError
from sbxcheck.transports.known_hosts import (
    KnownHosts,
    fingerprint_sha256,
    hash_hostname,
    host_key_algorithms,
    match_host_patterns,
)
from sbxcheck.transports.ssh_connect import ResolvedHost, SshSettings, parse_jump_spec, resolve_host


def _ed25519() -> str:
    pub = ed25519.Ed25519PrivateKey.generate().public_key()
    return pub.public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()


def _ecdsa() -> str:
    pub = ec.generate_private_key(ec.SECP256R1()).public_key()
    return pub.public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()


def _pkey(line: str) -> paramiko.PKey:
    key_type, b64 = line.split()[:2]
    return paramiko.PKey.from_type_string(key_type, base64.b64decode(b64))


def _fp(line: str) -> str:
    return fingerprint_sha256(base64.b64decode(line.split()[1]))


KEY_A = _ed25519()
KEY_B = _ed25519()
KEY_E = _ecdsa()
KH = Path("/etc/kh")


def _kh(text: str) -> KnownHosts:
    return KnownHosts.parse(text, KH)


def _lines(kh: KnownHosts, name: str) -> list[int]:
    return [e.line for e in kh.lookup(name)]


# --------------------------------------------------------------------------- matching


def test_plain_and_list_entries() -> None:
    kh = _kh(f"web1 {KEY_A}\nweb2,10.0.0.2 {KEY_B}\n")
    assert _lines(kh, "web1") == [1]
    assert _lines(kh, "WEB1") == [1]  # host names compare case-insensitively
    assert _lines(kh, "web2") == [2] and _lines(kh, "10.0.0.2") == [2]
    assert _lines(kh, "web3") == [] and _lines(kh, "web") == []
    assert kh.warnings == ()


def test_wildcards() -> None:
    kh = _kh(f"*.exe.xyz {KEY_A}\nvm?.lab {KEY_B}\n")
    assert _lines(kh, "a.exe.xyz") == [1] and _lines(kh, "x.y.exe.xyz") == [1]
    assert _lines(kh, "exe.xyz") == [] and _lines(kh, "a.exe.xyz.evil") == []
    assert _lines(kh, "vm1.lab") == [2] and _lines(kh, "vm10.lab") == []


def test_negation() -> None:
    kh = _kh(f"*.exe.xyz,!bad.exe.xyz {KEY_A}\n")
    assert _lines(kh, "good.exe.xyz") == [1]
    assert _lines(kh, "bad.exe.xyz") == []
    assert not match_host_patterns("x", ["!x"])  # negation alone never matches


def test_hashed_entry_made_with_hmac_sha1() -> None:
    salt = os.urandom(20)
    digest = hmac.new(salt, b"secret-host.example", hashlib.sha1).digest()
    hashed = f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"
    assert hashed == hash_hostname("secret-host.example", salt)
    kh = _kh(f"{hashed} {KEY_A}\n{hash_hostname('[10.1.1.1]:2222', os.urandom(20))} {KEY_B}\n")
    assert _lines(kh, "secret-host.example") == [1]
    assert _lines(kh, "other.example") == []
    assert _lines(kh, "[10.1.1.1]:2222") == [2] and _lines(kh, "10.1.1.1") == []


def test_bracketed_port_names() -> None:
    kh = _kh(f"[127.0.0.1]:2222 {KEY_A}\n127.0.0.1 {KEY_B}\n[10.0.0.*]:2200 {KEY_E}\n")
    assert _lines(kh, "[127.0.0.1]:2222") == [1]
    assert _lines(kh, "127.0.0.1") == [2]
    assert _lines(kh, "[127.0.0.1]:2223") == []
    assert _lines(kh, "[10.0.0.7]:2200") == [3]  # '[' is literal, '*' still a wildcard


def test_markers_and_garbage_lines() -> None:
    kh = _kh(
        "# comment\n"
        "\n"
        f"@cert-authority *.exe.xyz {KEY_A}\n"
        "this line is garbage\n"
        f"web1 ssh-ed25519 not-base64!!\n"
        f"web1 ssh-rsa {KEY_A.split()[1]}\n"  # type field disagrees with the key
        f"@bogus web1 {KEY_A}\n"
        "web1 1024 35 12345\n"  # SSH1
        f"  web1   {KEY_A}   trailing comment  \n"
    )
    assert _lines(kh, "web1") == [9]
    assert kh.lookup("a.exe.xyz") == []  # @cert-authority is not a host key
    assert len(kh.warnings) == 5
    assert [w.split(": ")[0] for w in kh.warnings] == [f"{KH}:{n}" for n in (4, 5, 6, 7, 8)]
    assert all(w.endswith("line skipped") for w in kh.warnings)


def test_load_missing_file_is_a_warning(tmp_path: Path) -> None:
    real = tmp_path / "known_hosts"
    real.write_text(f"web1 {KEY_A}\n")
    kh = KnownHosts.load([tmp_path / "missing", real])
    assert _lines(kh, "web1") == [1] and kh.entries[0].path == real
    assert kh.warnings == (f"{tmp_path / 'missing'}: known_hosts file not found",)


def test_host_key_algorithms() -> None:
    assert host_key_algorithms("ssh-rsa")[:2] == ("rsa-sha2-512", "rsa-sha2-256")
    assert host_key_algorithms("ssh-dss") == ()
    kh = _kh(f"web1 {KEY_A}\nweb1 {KEY_E}\n")
    assert kh.host_key_algorithms("web1") == {"ssh-ed25519", "ecdsa-sha2-nistp256"}
    assert kh.host_key_algorithms("web2") == set()


# --------------------------------------------------------------------------- verify


def test_verify_accepts_listed_key() -> None:
    kh = _kh(f"web1 {KEY_B}\nweb1 {KEY_A}\n")
    assert kh.verify("web1", _pkey(KEY_A)).line == 2


def test_verify_mismatch_names_everything() -> None:
    kh = _kh(f"web9 {KEY_A}\n*.lab {KEY_E}\nweb1.lab {KEY_A}\n")
    with pytest.raises(HostKeyMismatch) as info:
        kh.verify("web1.lab", _pkey(KEY_B))
    msg = info.value.message
    assert "web1.lab" in msg and "ssh-ed25519" in msg and _fp(KEY_B) in msg
    assert f"{KH}:3" in msg  # an expected entry of the same key type is named first
    assert info.value.evidence["expected_at"] == [f"{KH}:2", f"{KH}:3"]
    assert KEY_B.split()[1] not in msg


def test_verify_revoked() -> None:
    kh = _kh(f"web1 {KEY_A}\n@revoked * {KEY_A}\n")
    with pytest.raises(HostKeyMismatch) as info:
        kh.verify("web1", _pkey(KEY_A))
    assert "revoked" in info.value.message and f"{KH}:2" in info.value.message


def test_verify_unknown() -> None:
    kh = _kh(f"web1 {KEY_A}\n@cert-authority web2 {KEY_B}\n")
    with pytest.raises(HostKeyUnknown) as info:
        kh.verify("web3", _pkey(KEY_A))
    assert "web3" in info.value.message and _fp(KEY_A) in info.value.message
    with pytest.raises(HostKeyUnknown) as ca:
        kh.verify("web2", _pkey(KEY_B))
    assert "cert-authority" in ca.value.message
    # a revoked entry alone does not make a host known
    with pytest.raises(HostKeyUnknown):
        _kh(f"@revoked web1 {KEY_B}\n").verify("web1", _pkey(KEY_A))


# --------------------------------------------------------------------------- names and ssh_config


def _resolved(**kw: object) -> ResolvedHost:
    base: dict[str, object] = dict(
        alias="a",
        hostname="h.example",
        port=22,
        user="u",
        identity_files=(),
        proxy_jump=(),
        host_key_alias=None,
    )
    base.update(kw)
    return ResolvedHost(**base)  # type: ignore[arg-type]


def test_known_hosts_name() -> None:
    assert _resolved().known_hosts_name() == "h.example"
    assert _resolved(port=2222).known_hosts_name() == "[h.example]:2222"
    assert _resolved(port=2222, host_key_alias="vm-7").known_hosts_name() == "vm-7"


def test_resolve_host_from_ssh_config(tmp_path: Path) -> None:
    (tmp_path / "keys").mkdir()
    cfg = tmp_path / "ssh_config"
    cfg.write_text(
        "Host web*\n"
        "  HostName %h.exe.xyz\n"
        "  Port 2222\n"
        "  User deploy\n"
        "  IdentityFile ~/.ssh/id_web\n"
        "  IdentityFile keys/id_rel\n"
        "  ProxyJump bastion, ops@b2:2200\n"
        "  HostKeyAlias web-fleet\n"
        "\n"
        "Host bastion\n"
        "  HostName 10.0.0.1\n"
        "\n"
        "Host nojump\n"
        "  ProxyJump none\n"
    )
    settings = SshSettings(config_file=cfg, identity_file=tmp_path / "fallback")
    r = resolve_host("web1", settings)
    assert (r.alias, r.hostname, r.port, r.user) == ("web1", "web1.exe.xyz", 2222, "deploy")
    assert r.identity_files == (Path("~/.ssh/id_web").expanduser(), tmp_path / "keys" / "id_rel")
    assert r.proxy_jump == ("bastion", "ops@b2:2200")
    assert r.host_key_alias == "web-fleet" and r.known_hosts_name() == "web-fleet"

    b = resolve_host("bastion", settings)
    assert (b.hostname, b.port, b.user) == ("10.0.0.1", 22, getpass.getuser())
    assert b.identity_files == (tmp_path / "fallback",)  # no IdentityFile in config
    assert b.proxy_jump == () and b.host_key_alias is None
    assert resolve_host("nojump", settings).proxy_jump == ()


def test_resolve_host_without_config() -> None:
    r = resolve_host("10.9.9.9", SshSettings(identity_file=Path("/k/id")))
    assert (r.hostname, r.port, r.user, r.identity_files) == (
        "10.9.9.9",
        22,
        getpass.getuser(),
        (Path("/k/id"),),
    )


def test_resolve_host_bad_port(tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host x\n  Port 99999\n")
    with pytest.raises(InventoryError, match="invalid Port"):
        resolve_host("x", SshSettings(config_file=cfg))
    with pytest.raises(InventoryError, match="cannot read ssh_config"):
        resolve_host("x", SshSettings(config_file=tmp_path / "missing"))


def test_parse_jump_spec() -> None:
    assert parse_jump_spec("bastion") == (None, "bastion", None)
    assert parse_jump_spec("ops@b2:2200") == ("ops", "b2", 2200)
    assert parse_jump_spec("ssh://ops@b3") == ("ops", "b3", None)
    assert parse_jump_spec("[fe80::1]:22") == (None, "fe80::1", 22)
