"""The memory a hostile body can cost: measured in a child process, bounded by twice the cap.

Each case runs in a fresh child that reads a loopback server: a ``gzip, gzip`` bomb (980 bytes to
512 MiB), an endless body plain and gzipped, the run items' app probe (64 KiB cap) on the bomb, and
``sbxcheck doctor`` against an OpenRouter that answers deep JSON and an endless body. The child's
own high-water mark (VmHWM, reset through ``/proc/self/clear_refs`` before each case) less its
resident size before the case must stay within twice the cap plus :data:`SLACK` (decoders, the
reader thread, the refused body's last piece).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.hostile_http import Answer, HostileServer, endless_gzip, endless_zeros, gzip_bomb

MiB = 1 << 20
SLACK = 8 * MiB
DEEP = b"[" * 5000 + b"]" * 5000

_CHILD = r"""
import json, sys, time
from sbxcheck.errors import SbxError
from sbxcheck.transports.http import MAX_BODY_BYTES, RetryPolicy, get_start, new_client, send

def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) * 1024

def measured(call):
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the high-water mark starts again from what is resident now
    before = status("VmRSS")
    started = time.monotonic()
    try:
        said = call()
    except SbxError as exc:
        said = exc.message
    return {"before": before, "peak": status("VmHWM"), "said": str(said)[:300],
            "seconds": round(time.monotonic() - started, 2)}

base = sys.argv[1]
client = new_client(base_url=base, timeout=60.0)
def get(path):
    return send(client, "GET", path, label="GET " + path, base_url=base, timeout_s=120.0,
                policy=RetryPolicy(retries=0))
get("/small")  # the transport's own first use (imports, the reader thread) is no part of a case
cases = {
    "gzip, gzip bomb (16 MiB cap)": (MAX_BODY_BYTES, lambda: get("/bomb")),
    "endless body (16 MiB cap)": (MAX_BODY_BYTES, lambda: get("/endless")),
    "endless gzip body (16 MiB cap)": (MAX_BODY_BYTES, lambda: get("/endless-gzip")),
    "app probe on the bomb (64 KiB cap)": (
        64 * 1024, lambda: len(get_start(base + "/bomb", timeout_s=120.0, max_bytes=64 * 1024).content)
    ),
}
print(json.dumps({name: {"cap": cap, **measured(call)} for name, (cap, call) in cases.items()}))
"""

_DOCTOR_CHILD = r"""
import json, sys
from sbxcheck.cli import main
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
code = main(["doctor", "--inventory", sys.argv[1]])
with open("/proc/self/status") as f:
    peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) * 1024
print(json.dumps({"code": code, "peak": peak}))
"""

pytestmark = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")


def _dribble() -> Iterator[bytes]:
    for byte in b'{"data": {"is_provisioning_key": true}}':
        time.sleep(1.0)
        yield bytes([byte])


def test_a_bomb_and_an_endless_body_cost_at_most_twice_the_cap() -> None:
    bomb = gzip_bomb(512 * MiB, layers=2)
    answers = {
        "/small": Answer(200, {"content-type": "application/json"}, lambda: [b"{}"]),
        "/bomb": Answer(200, {"content-type": "application/json", "content-encoding": "gzip, gzip"}, lambda: [bomb]),
        "/endless": Answer(200, {"content-type": "application/json"}, endless_zeros, chunked=True),
        "/endless-gzip": Answer(
            200, {"content-type": "application/json", "content-encoding": "gzip"}, endless_gzip, chunked=True
        ),
    }
    with HostileServer(answers) as server:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, server.url], capture_output=True, text=True, timeout=600, check=False
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"bomb of {len(bomb)} bytes decoding to 512 MiB")
    for name, case in seen.items():
        grew = case["peak"] - case["before"]
        print(f"{name}: peak {case['peak'] / MiB:.1f} MiB, {grew / MiB:.1f} MiB above the "
              f"{case['before'] / MiB:.1f} MiB before it, in {case['seconds']} s: {case['said'][:90]}")  # fmt: skip
        assert grew <= 2 * case["cap"] + SLACK, (name, case)
    for name in ("gzip, gzip bomb (16 MiB cap)", "endless body (16 MiB cap)", "endless gzip body (16 MiB cap)"):
        assert "above 16 MiB (on the wire or decoded); refused, not parsed" in seen[name]["said"], seen[name]
    assert seen["app probe on the bomb (64 KiB cap)"]["said"] == str(64 * 1024)


def _doctor(tmp_path: Path, answers: dict[str, Answer]) -> tuple[dict[str, int], str, float]:
    checkout = tmp_path / "checkout"
    (checkout / "adws" / "adw_sssf_config").mkdir(parents=True)
    (checkout / "adws" / "adw_sssf_config" / "sssf.config.yaml").write_text("models: []\n")
    with HostileServer(answers) as server:
        inventory = tmp_path / "sbxcheck.toml"
        inventory.write_text(
            f'[sssf]\ncheckout = "{checkout}"\nopenrouter_base_url = "{server.url}/api/v1"\n'
            'provisioning_key_env = "SBX_TEST_PROVISIONING_KEY"\n'
        )
        env = {**os.environ, "SBX_TEST_PROVISIONING_KEY": "sk-or-v1-" + "5" * 64}
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-c", _DOCTOR_CHILD, str(inventory)],
            capture_output=True, text=True, timeout=300, check=False, env=env, cwd=tmp_path,
        )  # fmt: skip
        wall = time.monotonic() - started
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    *lines, last = proc.stdout.strip().splitlines()
    return json.loads(last), "\n".join(lines), wall


def test_doctors_openrouter_check_reads_through_the_bounded_transport(tmp_path: Path) -> None:
    """Deep JSON is one line (not a RecursionError), an endless body is refused at the cap (not 6 GB)."""
    json_type = {"content-type": "application/json"}
    healthy = {
        "/api/v1/key": Answer(200, json_type, lambda: [b'{"data": {"is_provisioning_key": true}}']),
        "/api/v1/credits": Answer(200, json_type, lambda: [b'{"data": {"total_credits": 10, "total_usage": 1}}']),
    }
    hostile = {
        "/api/v1/key": Answer(200, json_type, lambda: [DEEP]),
        "/api/v1/credits": Answer(200, json_type, endless_zeros, chunked=True),
    }
    (tmp_path / "healthy").mkdir()
    (tmp_path / "hostile").mkdir()
    baseline, out, _ = _doctor(tmp_path / "healthy", healthy)
    assert "✓ OpenRouter provisioning key" in out and "✓ OpenRouter /credits" in out, out
    result, out, _ = _doctor(tmp_path / "hostile", hostile)
    print(f"doctor: peak {baseline['peak'] / MiB:.1f} MiB against a healthy OpenRouter, "
          f"{result['peak'] / MiB:.1f} MiB against deep JSON and an endless body")  # fmt: skip
    assert result["code"] == 1
    assert "✗ OpenRouter provisioning key: OpenRouter GET /key: JSON nested deeper than 64 levels" in out, out
    assert "✗ OpenRouter /credits: OpenRouter GET /credits: response body above 16 MiB" in out, out
    assert result["peak"] <= baseline["peak"] + 2 * 16 * MiB + SLACK, (baseline, result)


def test_doctors_openrouter_check_has_a_whole_request_deadline(tmp_path: Path) -> None:
    """An answer dribbled one byte a second cannot hold doctor past the request's 15 s deadline."""
    answers = {
        "/api/v1/key": Answer(200, {"content-type": "application/json"}, _dribble, chunked=True),
        "/api/v1/credits": Answer(200, {"content-type": "application/json"}, lambda: [b'{"data": {}}']),
    }
    _, out, wall = _doctor(tmp_path, answers)
    assert "✗ OpenRouter provisioning key: OpenRouter GET /key: no complete answer within 15s" in out, out
    assert wall < 35, wall  # 15 s and the interpreter's start, not the 40 s the answer takes
