"""A strict OpenSSH ``known_hosts`` reader and host-key verifier.

paramiko's ``HostKeys`` ignores wildcards, negation and markers, so this module parses the
format itself (see sshd(8), "SSH_KNOWN_HOSTS FILE FORMAT"):

* comma-separated host patterns with ``*`` / ``?`` wildcards and ``!negation``;
* hashed names ``|1|base64(salt)|base64(hmac_sha1(salt, name))``;
* ``[host]:port`` names for non-standard ports;
* ``@revoked`` (a matching presented key is refused) and ``@cert-authority`` (kept, not used:
  host certificates are not supported);
* comments and blank lines. Unparseable lines are skipped with a ``file:line`` warning.

Verification never adds or accepts keys: unknown or mismatching keys raise.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import paramiko

from sbxcheck.errors import HostKeyMismatch, HostKeyUnknown

MARKER_REVOKED = "revoked"
MARKER_CERT_AUTHORITY = "cert-authority"
_MARKERS = {"@revoked": MARKER_REVOKED, "@cert-authority": MARKER_CERT_AUTHORITY}
_HASH_MAGIC = "|1|"

# known_hosts key type -> host key algorithms paramiko may negotiate to obtain such a key.
_HOST_KEY_ALGORITHMS: dict[str, tuple[str, ...]] = {
    "ssh-ed25519": ("ssh-ed25519",),
    "ecdsa-sha2-nistp256": ("ecdsa-sha2-nistp256",),
    "ecdsa-sha2-nistp384": ("ecdsa-sha2-nistp384",),
    "ecdsa-sha2-nistp521": ("ecdsa-sha2-nistp521",),
    "ssh-rsa": ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"),
}


def fingerprint_sha256(blob: bytes) -> str:
    """OpenSSH-style ``SHA256:<base64, unpadded>`` fingerprint of a public key blob."""
    digest = hashlib.sha256(blob).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


def host_key_algorithms(key_type: str) -> tuple[str, ...]:
    """Host key algorithms that yield a key of ``key_type`` (empty if unsupported)."""
    return _HOST_KEY_ALGORITHMS.get(key_type, ())


@lru_cache(maxsize=1024)
def _pattern_regex(pattern: str) -> re.Pattern[str]:
    parts = [".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern]
    return re.compile("".join(parts), re.DOTALL)


def match_pattern(name: str, pattern: str) -> bool:
    """OpenSSH ``match_pattern``: ``*`` and ``?`` wildcards only (``[`` is literal), case-insensitive."""
    return _pattern_regex(pattern.lower()).fullmatch(name.lower()) is not None


def match_host_patterns(name: str, patterns: Iterable[str]) -> bool:
    """True if a positive pattern matches ``name`` and no ``!negated`` pattern does."""
    found = False
    for pattern in patterns:
        if pattern.startswith("!"):
            if match_pattern(name, pattern[1:]):
                return False
        elif match_pattern(name, pattern):
            found = True
    return found


def hash_hostname(name: str, salt: bytes) -> str:
    """The hashed known_hosts form of ``name`` with ``salt`` (as ``ssh-keygen -H`` writes it)."""
    digest = hmac.new(salt, name.encode("utf-8"), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def _parse_hashed(field: str) -> tuple[bytes, bytes] | None:
    parts = field[len(_HASH_MAGIC) :].split("|")
    if len(parts) != 2:
        return None
    try:
        salt = base64.b64decode(parts[0], validate=True)
        digest = base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(digest) != hashlib.sha1().digest_size or not salt:
        return None
    return salt, digest


def _blob_key_type(blob: bytes) -> str | None:
    if len(blob) < 4:
        return None
    (length,) = struct.unpack(">I", blob[:4])
    if length == 0 or len(blob) < 4 + length:
        return None
    try:
        return blob[4 : 4 + length].decode("ascii")
    except UnicodeDecodeError:
        return None


@dataclass(frozen=True)
class KnownHostEntry:
    """One usable line of a known_hosts file."""

    path: Path
    line: int
    marker: str | None  # None, MARKER_REVOKED or MARKER_CERT_AUTHORITY
    hosts: str  # the host field as written (a pattern list or one hashed name)
    key_type: str
    key_blob: bytes

    @property
    def location(self) -> str:
        """``file:line`` of this entry."""
        return f"{self.path}:{self.line}"

    @property
    def fingerprint(self) -> str:
        """SHA256 fingerprint of the listed key."""
        return fingerprint_sha256(self.key_blob)

    @property
    def is_hashed(self) -> bool:
        return self.hosts.startswith(_HASH_MAGIC)

    def matches(self, name: str) -> bool:
        """Whether this entry's host field applies to the known_hosts ``name``."""
        if self.is_hashed:
            parsed = _parse_hashed(self.hosts)
            if parsed is None:
                return False
            salt, digest = parsed
            for candidate in dict.fromkeys((name, name.lower())):
                mac = hmac.new(salt, candidate.encode("utf-8"), hashlib.sha1).digest()
                if hmac.compare_digest(mac, digest):
                    return True
            return False
        return match_host_patterns(name, self.hosts.split(","))

    def matches_key(self, key: paramiko.PKey) -> bool:
        """Whether ``key`` is the key this entry lists (compares public key blobs)."""
        return hmac.compare_digest(key.asbytes(), self.key_blob)


class KnownHosts:
    """Parsed known_hosts files: lookup and strict verification of presented host keys."""

    def __init__(
        self,
        entries: Iterable[KnownHostEntry] = (),
        warnings: Iterable[str] = (),
        paths: Iterable[Path] = (),
    ) -> None:
        self.entries: tuple[KnownHostEntry, ...] = tuple(entries)
        self.warnings: tuple[str, ...] = tuple(warnings)
        self.paths: tuple[Path, ...] = tuple(paths)

    @classmethod
    def load(cls, paths: Iterable[Path]) -> KnownHosts:
        """Read every file in ``paths``; a missing file is a warning, not an error."""
        entries: list[KnownHostEntry] = []
        warnings: list[str] = []
        path_list = [Path(p).expanduser() for p in paths]
        for path in path_list:
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except FileNotFoundError:
                warnings.append(f"{path}: known_hosts file not found")
                continue
            except OSError as exc:
                warnings.append(f"{path}: cannot read known_hosts file: {exc.strerror or exc}")
                continue
            parsed = cls.parse(text, path)
            entries.extend(parsed.entries)
            warnings.extend(parsed.warnings)
        return cls(entries, warnings, path_list)

    @classmethod
    def parse(cls, text: str, path: Path) -> KnownHosts:
        """Parse known_hosts ``text``; ``path`` is used for locations and warnings."""
        entries: list[KnownHostEntry] = []
        warnings: list[str] = []
        for lineno, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            entry_or_problem = _parse_line(line, path, lineno)
            if isinstance(entry_or_problem, str):
                warnings.append(f"{path}:{lineno}: {entry_or_problem}; line skipped")
            else:
                entries.append(entry_or_problem)
        return cls(entries, warnings, (path,))

    def _matching(self, name: str) -> list[KnownHostEntry]:
        return [e for e in self.entries if e.matches(name)]

    def lookup(self, name: str) -> list[KnownHostEntry]:
        """Plain (unmarked) entries whose host field matches ``name``, in file order."""
        return [e for e in self._matching(name) if e.marker is None]

    def revoked(self, name: str) -> list[KnownHostEntry]:
        """``@revoked`` entries that apply to ``name``."""
        return [e for e in self._matching(name) if e.marker == MARKER_REVOKED]

    def host_key_algorithms(self, name: str) -> set[str]:
        """Host key algorithms for which a plain entry for ``name`` exists."""
        algorithms: set[str] = set()
        for entry in self.lookup(name):
            algorithms.update(host_key_algorithms(entry.key_type))
        return algorithms

    def verify(self, name: str, key: paramiko.PKey) -> KnownHostEntry:
        """Return the entry matching the presented ``key`` for ``name``, or raise.

        Raises HostKeyMismatch when the key is @revoked or when entries exist for ``name`` but
        none lists this key; HostKeyUnknown when no entry exists for ``name``.
        """
        blob = key.asbytes()
        presented = f"{key.get_name()} {fingerprint_sha256(blob)}"
        evidence: dict[str, object] = {
            "known_hosts_name": name,
            "presented_key_type": key.get_name(),
            "presented_fingerprint": fingerprint_sha256(blob),
            "known_hosts_files": [str(p) for p in self.paths],
        }
        for entry in self.revoked(name):
            if entry.matches_key(key):
                raise HostKeyMismatch(
                    f"host key for {name} is revoked: the server presented {presented}, "
                    f"marked @revoked at {entry.location}; refusing to connect",
                    evidence={**evidence, "revoked_at": entry.location},
                )
        candidates = self.lookup(name)
        for entry in candidates:
            if entry.matches_key(key):
                return entry
        if not candidates:
            where = ", ".join(str(p) for p in self.paths) or "(no known_hosts files)"
            ca_only = any(e.marker == MARKER_CERT_AUTHORITY for e in self._matching(name))
            extra = " (only @cert-authority entries match; host certificates are unsupported)"
            raise HostKeyUnknown(
                f"host key unknown for {name}: no known_hosts entry in {where}"
                f"{extra if ca_only else ''}; the server presented {presented}; strict checking "
                "refuses it (verify the fingerprint out of band, then add it to known_hosts)",
                evidence=evidence,
            )
        same_type = [e for e in candidates if e.key_type == _known_hosts_type(key)]
        expected = (same_type or candidates)[0]
        raise HostKeyMismatch(
            f"host key mismatch for {name}: the server presented {presented}, which matches none "
            f"of the {len(candidates)} known_hosts entr{'y' if len(candidates) == 1 else 'ies'} "
            f"for that name (expected e.g. {expected.key_type} {expected.fingerprint} at "
            f"{expected.location}); refusing to connect",
            evidence={
                **evidence,
                "expected_at": [e.location for e in candidates],
                "expected_fingerprints": [f"{e.key_type} {e.fingerprint}" for e in candidates],
            },
        )


def _known_hosts_type(key: paramiko.PKey) -> str:
    return _blob_key_type(key.asbytes()) or key.get_name()


def _parse_line(line: str, path: Path, lineno: int) -> KnownHostEntry | str:
    """Parse one non-comment line into an entry, or return why it is unusable."""
    fields = line.split()
    marker: str | None = None
    if fields[0].startswith("@"):
        if fields[0] not in _MARKERS:
            return f"unknown marker {fields[0]!r}"
        marker = _MARKERS[fields[0]]
        fields = fields[1:]
    if len(fields) < 3:
        return "expected 'hosts keytype base64-key'"
    hosts, key_type, key_b64 = fields[0], fields[1], fields[2]
    if key_type.isdigit():
        return "SSH protocol 1 key format is not supported"
    if hosts.startswith(_HASH_MAGIC):
        if _parse_hashed(hosts) is None:
            return "malformed hashed host name"
    elif not all(hosts.split(",")):
        return "empty host pattern"
    try:
        blob = base64.b64decode(key_b64, validate=True)
    except (binascii.Error, ValueError):
        return "key is not valid base64"
    blob_type = _blob_key_type(blob)
    if blob_type is None:
        return "key blob is malformed"
    if blob_type != key_type:
        return f"key type field {key_type!r} does not match the key ({blob_type!r})"
    return KnownHostEntry(
        path=path, line=lineno, marker=marker, hosts=hosts, key_type=key_type, key_blob=blob
    )
