"""Orphan audit: sbx-* keys joined with run records and exe.dev VMs; exe.dev's ls --json client."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sbxcheck.checks.orphans import REAP_ADVICE, audit_orphans, orphan_summary
from sbxcheck.clients.exedev import ExeDevCommandFailed, ExeVm, list_vms
from sbxcheck.clients.openrouter import OpenRouterKey
from sbxcheck.errors import BadResponseError, HostUnreachable, SbxError
from sbxcheck.results import CheckResult, Classification, Outcome
from sbxcheck.transports.ssh import CommandResult


def h(n: int) -> str:
    return f"{n:064x}"


def record(
    runs: Path, run_id: str, *, key_hash: str | None, closed_at: str | None = None, vm: str | None = ""
) -> None:
    doc = {
        "run_id": run_id,
        "vm_name": run_id if vm == "" else vm,
        "https_url": f"https://{run_id}.exe.xyz",
        "key_hash": key_hash,
        "limit": 50.0,
        "spend": None,
        "session_id": None,
        "commit_sha": "d34db33f" * 5,
        "ports": None,
        "pid": None,
        "created_at": "2026-06-01T09:00:00Z",
        "closed_at": closed_at,
    }
    (runs / f"{run_id}.json").write_text(json.dumps(doc, indent=2) + "\n")


def key(name: str, n: int, **extra: Any) -> OpenRouterKey:
    return OpenRouterKey.model_validate({"hash": h(n), "name": name, "usage": 0.25, "limit": 50.0, **extra})


def vms(*names: str) -> Callable[[], list[ExeVm]]:
    return lambda: [ExeVm(vm_name=n, status="running") for n in names]


def fails(exc: SbxError) -> Callable[[], Any]:
    def call() -> Any:
        raise exc

    return call


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    d = tmp_path / ".sandbox" / "runs"
    d.mkdir(parents=True)
    record(d, "live-20260601-aaaaaa", key_hash=h(1))
    record(d, "done-20260601-bbbbbb", key_hash=h(2), closed_at="2026-06-02T10:00:00Z")
    record(d, "lost-20260601-cccccc", key_hash=h(3))
    return d


PERSONAL = [key("mac-mini-agent", 90), key("OAuth: localhost", 91), key("benchy", 92)]


def keyset(*extra: OpenRouterKey) -> Callable[[], list[OpenRouterKey]]:
    base = [
        key("sbx-live-20260601-aaaaaa", 1),
        key("sbx-done-20260601-bbbbbb", 2),
        key("sbx-lost-20260601-cccccc", 3),
        *PERSONAL,
    ]
    return lambda: [*base, *extra]


def by_target(results: Sequence[CheckResult]) -> dict[str, CheckResult]:
    return {r.target: r for r in results}


def test_orphans_by_closed_record_gone_vm_and_missing_record(runs: Path) -> None:
    results = audit_orphans(
        keyset(key("sbx-ghost-20260601-dddddd", 4), key("sbx-other-20260601-eeeeee", 5)),
        vms("live-20260601-aaaaaa", "done-20260601-bbbbbb", "other-20260601-eeeeee"),
        runs,
    )
    got = by_target(results)
    assert set(got) == {
        "done-20260601-bbbbbb",
        "lost-20260601-cccccc",
        "ghost-20260601-dddddd",
        "other-20260601-eeeeee",
    }
    assert all(r.outcome is Outcome.FAILED for r in results)

    closed = got["done-20260601-bbbbbb"]
    assert closed.evidence["why"] == "record closed 2026-06-02T10:00:00Z"
    assert closed.evidence["key_hash"] == h(2) and closed.evidence["run_id"] == "done-20260601-bbbbbb"
    assert closed.recommendation == REAP_ADVICE and closed.recommendation.startswith("just sbx manage reap")
    assert "sbxcheck deleted nothing" in closed.recommendation
    assert closed.cause == "orphaned-sbx-keys"

    assert got["lost-20260601-cccccc"].evidence["why"] == "vm lost-20260601-cccccc no longer exists"
    assert (
        got["ghost-20260601-dddddd"].evidence["why"]
        == "no run record; vm ghost-20260601-dddddd no longer exists"
    )
    other = got["other-20260601-eeeeee"]
    assert other.evidence["why"].startswith("no run record on this host (vm other-20260601-eeeeee is up")
    assert "reap" not in (other.recommendation or "")

    text = "".join(r.model_dump_json() for r in results)
    for personal in PERSONAL:
        assert personal.name not in text and personal.hash not in text
    assert "live-20260601-aaaaaa" not in text


def test_no_orphans_passes_with_counts(runs: Path) -> None:
    (runs / "done-20260601-bbbbbb.json").unlink()
    (runs / "lost-20260601-cccccc.json").unlink()
    [r] = audit_orphans(
        lambda: [key("sbx-live-20260601-aaaaaa", 1), *PERSONAL], vms("live-20260601-aaaaaa"), runs
    )
    assert r.outcome is Outcome.PASSED
    assert r.evidence["sbx_keys"] == 1 and r.evidence["other_keys_ignored"] == 3
    assert r.evidence["kept_runs"] == ["live-20260601-aaaaaa"] and r.evidence["exe_dev_vms"] == 1


def test_key_named_exactly_sbx_is_flagged_not_a_run(runs: Path) -> None:
    results = audit_orphans(lambda: [key("sbx-", 7)], vms(), runs)
    [r] = results
    assert r.outcome is Outcome.FAILED and r.target == "sbx-"
    assert r.evidence["run_id"] is None and r.evidence["key_hash"] == h(7)
    assert "names no run" in r.message and r.recommendation is not None and "reap" not in r.recommendation


def test_unreachable_openrouter_is_an_error_not_orphans(runs: Path) -> None:
    [r] = audit_orphans(fails(HostUnreachable("OpenRouter GET /keys: cannot connect")), vms(), runs)
    assert r.outcome is Outcome.ERROR and r.classification is Classification.INFRA_UNREACHABLE
    assert "no key was judged" in r.message


def test_unreachable_exedev_never_makes_open_keys_orphans(runs: Path) -> None:
    results = audit_orphans(keyset(), fails(HostUnreachable("exe.dev: connection refused")), runs)
    got = by_target(results)
    # the closed record is an orphan whatever the VMs; the open ones are not judged
    assert got["done-20260601-bbbbbb"].outcome is Outcome.FAILED
    err = got["exe.dev"]
    assert err.outcome is Outcome.ERROR and err.classification is Classification.INFRA_UNREACHABLE
    assert err.evidence["unjudged_runs"] == ["live-20260601-aaaaaa", "lost-20260601-cccccc"]
    assert "upstream reap would count every VM as gone" in err.message
    assert "lost-20260601-cccccc" not in got and "live-20260601-aaaaaa" not in got


def test_unreadable_record_and_foreign_hash(runs: Path) -> None:
    (runs / "bad-20260601-ffffff.json").write_text("{not json")
    record(runs, "swap-20260601-999999", key_hash=h(99))
    results = audit_orphans(
        lambda: [key("sbx-bad-20260601-ffffff", 8), key("sbx-swap-20260601-999999", 9)],
        vms("bad-20260601-ffffff", "swap-20260601-999999"),
        runs,
    )
    got = by_target(results)
    assert "bad-20260601-ffffff" not in got  # an unreadable record is named, never an error of the audit
    assert got["swap-20260601-999999"].outcome is Outcome.FAILED
    assert "names another key" in got["swap-20260601-999999"].message
    assert "bad-20260601-ffffff.json: not valid JSON" in got["swap-20260601-999999"].message
    assert got["swap-20260601-999999"].evidence["keys_not_judged_unreadable_record"] == [
        "bad-20260601-ffffff"
    ]


def test_one_unreadable_record_never_turns_the_audit_into_an_error(runs: Path) -> None:
    (runs / "bad-20260601-ffffff.json").write_text("{not json")
    live = [key("sbx-live-20260601-aaaaaa", 1), key("sbx-lost-20260601-cccccc", 3)]
    [result] = audit_orphans(lambda: live, vms("live-20260601-aaaaaa", "lost-20260601-cccccc"), runs)
    assert result.outcome is Outcome.PASSED, result.message
    assert "bad-20260601-ffffff.json" in result.message
    assert set(result.evidence["unreadable_records"]) == {"bad-20260601-ffffff"}


def test_a_record_with_ports_as_a_list_is_read_as_upstream_writes_it(runs: Path) -> None:
    doc = json.loads((runs / "live-20260601-aaaaaa.json").read_text())
    doc["ports"] = [4501, 4600]  # run_record.py set ports='[4501,4600]' stores any JSON value
    (runs / "live-20260601-aaaaaa.json").write_text(json.dumps(doc))
    [result] = audit_orphans(
        keyset(), vms("live-20260601-aaaaaa", "done-20260601-bbbbbb", "lost-20260601-cccccc"), runs
    )
    assert result.outcome is Outcome.FAILED  # the closed run's key is the one orphan
    assert "unreadable_records" not in result.evidence


def test_missing_runs_dir_is_a_config_error(tmp_path: Path) -> None:
    [r] = audit_orphans(keyset(), vms(), tmp_path / "nope")
    assert r.outcome is Outcome.ERROR and r.classification is Classification.CONFIG_DEFECT


def test_summary_folds_items(runs: Path) -> None:
    results = audit_orphans(keyset(), fails(HostUnreachable("exe.dev down")), runs)
    s = orphan_summary(results)
    assert s.outcome is Outcome.ERROR and len(s.evidence["items"]) == 2
    assert s.recommendation == REAP_ADVICE
    assert orphan_summary(results[:1]) == results[0]


# ---------------------------------------------------------------- exe.dev ls --json


@dataclass
class OneShell:
    result: CommandResult
    alias: str = "exe.dev"
    sent: list[tuple[str, float | None]] = field(default_factory=list)

    def run(
        self, command: str, *, stdin: str | bytes | None = None, timeout: float | None = None
    ) -> CommandResult:
        self.sent.append((command, timeout))
        return self.result


def shell(code: int, out: str, err: str = "") -> OneShell:
    return OneShell(CommandResult(code, out, err, 0.01))


def test_list_vms_parses_the_verified_shape() -> None:
    doc = {
        "vms": [
            {
                "vm_name": "live-20260601-aaaaaa",
                "https_url": "https://live-20260601-aaaaaa.exe.xyz",
                "ssh_dest": "live-20260601-aaaaaa.exe.xyz",
                "status": "running",
                "region": "fra",
                "region_display": "Frankfurt",
                "proxy_port": 8000,
            },
            {"name": "legacy"},
        ]
    }
    sh = shell(0, json.dumps(doc))
    got = list_vms(sh)
    assert sh.sent == [("ls --json", 30.0)]
    assert [v.vm_name for v in got] == ["live-20260601-aaaaaa", "legacy"]
    assert got[0].model_extra == {"region_display": "Frankfurt", "proxy_port": 8000}
    assert list_vms(shell(0, '{"vms": []}')) == []


@pytest.mark.parametrize(
    ("sh", "exc"),
    [
        (shell(1, "", "error: internal error listing VMs\n"), ExeDevCommandFailed),
        (shell(255, "", "ssh: connect to host exe.dev port 22: Connection refused\n"), ExeDevCommandFailed),
        (shell(0, "Welcome to exe.dev!\n"), BadResponseError),
        (shell(0, '{"machines": []}'), BadResponseError),
        (shell(0, '{"vms": [{"status": "running"}]}'), BadResponseError),
        (shell(0, ""), BadResponseError),
    ],
)
def test_list_vms_failures_raise_never_empty(sh: OneShell, exc: type[SbxError]) -> None:
    with pytest.raises(exc) as info:
        list_vms(sh)
    assert info.value.evidence["ran"] == "ls --json"


def test_a_closed_runs_key_listed_disabled_is_revoked_not_an_orphan(runs: Path) -> None:
    listed = [
        key("sbx-live-20260601-aaaaaa", 1),
        key("sbx-done-20260601-bbbbbb", 2, disabled=True),
        key("sbx-lost-20260601-cccccc", 3),
        *PERSONAL,
    ]
    results = audit_orphans(lambda: listed, vms("live-20260601-aaaaaa"), runs)
    assert "done-20260601-bbbbbb" not in by_target(results)  # the lost run's key is still an orphan
    assert set(by_target(results)) == {"lost-20260601-cccccc"}
