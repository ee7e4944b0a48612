#!/usr/bin/env python3
"""JSON glue for the SSSF sandbox recipes (stdlib only). Never prints a key.

Verbs (JSON on stdin unless named):
  vm NAME               ``new --json`` or ``ls --json`` output -> ``<vm_name> <https_url>``; exit 1 if absent
  live NAME             ``ls --json`` output -> exit 0 if NAME is listed, 1 if not, 2 if unparseable
  mint KEYFILE HEADERS  ``POST /keys`` body -> writes the secret to KEYFILE (0600, O_EXCL), prints the hash
  get PATH              prints the value at a dotted PATH (``data.usage``, ``0.run_id``; null -> empty line)
  count                 number of items in ``data`` (exit 2 if there is no ``data`` list)
  merge FILE...         ``{"data": [...]}`` of every page file
  has-hash HASH         exit 0 if the key list holds HASH, else 1
  usage HASH            the usage of HASH in the key list (exit 1 if absent)
  table RECORDS LS      the ``manage list`` table (LS is ``-`` when ``ls --json`` failed)
  reap-plan KEYS RECORDS LS   orphaned ``sbx-`` keys as ``hash<TAB>name<TAB>spend<TAB>why`` lines
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

_SECRET = re.compile(r"sk-or-v1-[0-9A-Za-z]+")


def _stdin_json() -> Any:
    return json.loads(sys.stdin.read())


def _vm_entries(doc: Any) -> list[dict[str, Any]]:
    """Objects that may describe a VM: top level, ``vm``, ``vms[*]``."""
    if not isinstance(doc, dict):
        return []
    out = [doc]
    if isinstance(doc.get("vm"), dict):
        out.append(doc["vm"])
    vms = doc.get("vms")
    if isinstance(vms, list):
        out.extend(v for v in vms if isinstance(v, dict))
    return out


def _vm(name: str) -> int:
    try:
        doc = _stdin_json()
    except ValueError:
        return 2
    for entry in _vm_entries(doc):
        vm_name = entry.get("vm_name") or entry.get("name")
        if vm_name == name:
            url = entry.get("https_url") or entry.get("url") or f"https://{name}.exe.xyz"
            print(f"{vm_name} {url}")
            return 0
    return 1


def _live(name: str) -> int:
    try:
        doc = _stdin_json()
    except ValueError:
        return 2
    if not isinstance(doc, dict) or not isinstance(doc.get("vms"), list):
        return 2
    return 0 if any(isinstance(v, dict) and v.get("vm_name") == name for v in doc["vms"]) else 1


def _status(headers: Path) -> int:
    """The last HTTP status line of a curl ``-D`` dump (0 when none)."""
    status = 0
    for line in headers.read_text(encoding="latin-1").splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith("HTTP/") and parts[1].isdigit():
            status = int(parts[1])
    return status


def _mint(keyfile: Path, headers: Path) -> int:
    body = sys.stdin.read()
    status = _status(headers)
    if status not in (200, 201):
        print(f"mint failed: HTTP {status or '000'}: {_SECRET.sub('[redacted]', body.strip())[:300]}")
        return 1
    try:
        doc = json.loads(body)
    except ValueError:
        print("mint failed: the answer is not JSON")
        return 1
    top: dict[str, Any] = doc if isinstance(doc, dict) else {}
    data: dict[str, Any] = top["data"] if isinstance(top.get("data"), dict) else {}
    secret = top.get("key") or data.get("key")
    key_hash = top.get("hash") or data.get("hash")
    if not isinstance(secret, str) or not secret or not isinstance(key_hash, str) or not key_hash:
        print("mint failed: the answer holds no key or no hash")
        return 1
    try:
        fd = os.open(keyfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        print(f"mint failed: {keyfile} already exists")
        return 1
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(secret + "\n")
    print(key_hash)
    return 0


def _get(path: str) -> int:
    try:
        value: Any = _stdin_json()
    except ValueError:
        return 1
    for part in path.split("."):
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return 1
    if isinstance(value, dict | list):
        print(json.dumps(value, separators=(",", ":")))
    else:
        print("" if value is None else value)
    return 0


def _data(doc: Any) -> list[dict[str, Any]] | None:
    if isinstance(doc, dict) and isinstance(doc.get("data"), list):
        return [d for d in doc["data"] if isinstance(d, dict)]
    return None


def _load(path: str) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _vm_names(ls_file: str) -> set[str] | None:
    """VM names from an ``ls --json`` file; None when the call failed (``-``) or is unparseable."""
    if ls_file == "-":
        return None
    try:
        doc = _load(ls_file)
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("vms"), list):
        return None
    return {v["vm_name"] for v in doc["vms"] if isinstance(v, dict) and isinstance(v.get("vm_name"), str)}


def _money(value: Any) -> str:
    return f"${value}" if isinstance(value, int | float) and not isinstance(value, bool) else "-"


def _table(records_file: str, ls_file: str) -> int:
    records = _load(records_file)
    if not records:
        print("no runs yet — start one with: just mount <task-name>")
        return 0
    names = _vm_names(ls_file)

    def row(*cells: str) -> str:  # padded 34/8/7/10, always at least one space apart
        return "".join(f"{c:<{w - 1}} " for c, w in zip(cells, (34, 8, 7, 10), strict=False)) + cells[-1]

    print(row("RUN", "STATE", "VM", "SPEND", "CREATED"))
    for rec in records:
        state = "open" if rec["closed_at"] is None else "closed"
        vm_name = rec["vm_name"] or rec["run_id"]
        vm = "?" if names is None else ("up" if vm_name in names else "gone")
        created = (rec["created_at"] or "-").split("T")[0]
        print(row(rec["run_id"], state, vm, _money(rec["spend"]), created))
    return 0


def _reap_plan(keys_file: str, records_file: str, ls_file: str) -> int:
    keys = _data(_load(keys_file))
    if keys is None:
        print("reap: the key list has no data array", file=sys.stderr)
        return 1
    records = {r["run_id"]: r for r in _load(records_file)}
    live = _vm_names(ls_file) or set()  # a failed ls counts as {"vms": []}
    for key in keys:
        name = key.get("name")
        if not isinstance(name, str) or not name.startswith("sbx-"):
            continue  # personal keys are never printed
        run_id = name[len("sbx-") :]
        rec = records.get(run_id)
        vm = (rec or {}).get("vm_name") or run_id
        if rec is not None and rec["closed_at"] is not None:
            why = f"record closed {rec['closed_at']}"
        elif vm not in live:
            why = f"vm {vm} no longer exists"
        else:
            continue  # an open run with a live VM: left alone
        print(f"{key.get('hash', '')}\t{name}\t{_money(key.get('usage'))}\t{why}")
    return 0


def main(argv: list[str]) -> int:
    verb, args = (argv[0], argv[1:]) if argv else ("", [])
    try:
        if verb == "vm" and len(args) == 1:
            return _vm(args[0])
        if verb == "live" and len(args) == 1:
            return _live(args[0])
        if verb == "mint" and len(args) == 2:
            return _mint(Path(args[0]), Path(args[1]))
        if verb == "get" and len(args) == 1:
            return _get(args[0])
        if verb == "count" and not args:
            data = _data(_stdin_json())
            if data is None:
                return 2
            print(len(data))
            return 0
        if verb == "merge" and args:
            merged: list[dict[str, Any]] = []
            for page in args:
                merged.extend(_data(_load(page)) or [])
            print(json.dumps({"data": merged}))
            return 0
        if verb == "has-hash" and len(args) == 1:
            data = _data(_stdin_json()) or []
            return 0 if any(k.get("hash") == args[0] for k in data) else 1
        if verb == "usage" and len(args) == 1:
            data = _data(_stdin_json()) or []
            found = [k.get("usage") for k in data if k.get("hash") == args[0]]
            if not found:
                return 1
            print("" if found[0] is None else found[0])
            return 0
        if verb == "table" and len(args) == 2:
            return _table(args[0], args[1])
        if verb == "reap-plan" and len(args) == 3:
            return _reap_plan(args[0], args[1], args[2])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"sbx_json {verb}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
