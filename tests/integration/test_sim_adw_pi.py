"""The SSSF ADWs' pi call on a simulated VM: ``pi -p --mode json … --session-id ID --session-dir DIR …``.

The real ADWs (inkwell ``adws/adw_modules/agent_pi.py``, ``run``) start every agent that way, and the same
session id continues the agent's context. pi has ``--session-id`` from 0.76.0, so the default VM pi (0.83.0,
the exe.dev image's) runs it and 0.73.1 refuses it, which the fleet says before anything runs. Over real
SSH into a VM of the embedded fleet, from ``~/app``, with stdin ``/dev/null`` as the ADWs give pi.
With ``$SBXCHECK_TEST_INKWELL`` set, the checkout's own ``agent_pi.run`` makes the call on the VM.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.inkwell import inkwell_absent, inkwell_checkout

from sbxcheck.sim.fleet import SimFleet
from sbxcheck.sim.pi_releases import DEFAULT_PI_VERSION
from sbxcheck.transports.ssh import SshPool
from sbxcheck.transports.ssh_connect import SshSettings

pytestmark = pytest.mark.slow  # a served fleet and real pi calls over SSH

MODEL = "deepseek/deepseek-v4-flash-0731"
SESSION_ID = "sbx-adw-plan-0001"
CALL_TIMEOUT_S = 300.0  # one pi call answers in seconds; a loaded machine must not trip it


def vm_pool(fleet: SimFleet) -> SshPool:
    return SshPool(
        SshSettings(
            config_file=fleet.ssh_dir / "ssh_config",
            known_hosts=(fleet.ssh_dir / "known_hosts",),
            connect_timeout_s=30.0,
            command_timeout_s=CALL_TIMEOUT_S,
        )
    )


def adw_pi_call(prompt: str) -> str:
    """The command line agent_pi.run builds (provider, model, thinking, session id and dir, system prompt,
    tools, the prompt last), run from ~/app with stdin /dev/null."""
    argv = [
        "pi", "-p", "--mode", "json", "--provider", "openrouter", "--model", MODEL, "--thinking", "medium",
        "--session-id", SESSION_ID, "--session-dir", "$HOME/.sbx-adw/sessions",
        "--system-prompt", "You are the planner. Answer in one line.", "--tools", "read,bash", prompt,
    ]  # fmt: skip
    quoted = " ".join(a if a.startswith("$HOME") else shlex.quote(a) for a in argv)
    return f"cd ~/app && mkdir -p ~/.sbx-adw/sessions && {quoted} </dev/null"


def assistant_end(stdout: str) -> dict[str, Any]:
    events = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    assert events and events[0]["type"] == "session", stdout[:500]
    assert events[0]["id"] == SESSION_ID
    ends = [e["message"] for e in events if e["type"] == "message_end" and e["message"]["role"] == "assistant"]
    assert ends, stdout[-500:]
    message: dict[str, Any] = ends[-1]
    return message


@pytest.fixture(scope="module")
def default_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimFleet]:
    with SimFleet(tmp_path_factory.mktemp("adw-fleet"), runs=1) as fleet:
        yield fleet


def test_the_adws_session_id_call_runs_and_continues_on_a_vm_with_the_default_pi(default_fleet: SimFleet) -> None:
    fleet = default_fleet
    assert fleet.pi is not None and fleet.pi.version == DEFAULT_PI_VERSION
    pool = vm_pool(fleet)
    try:
        vm = pool.host(f"{fleet.run_ids[0]}.exe.xyz")
        first = vm.run(adw_pi_call("Reply with ping"))
        assert first.exit_code == 0, first.stderr[-500:]
        one = assistant_end(first.stdout)
        assert one["stopReason"] == "stop" and one["usage"]["cost"]["total"] > 0
        second = vm.run(adw_pi_call("Now reply with ping again"))
        assert second.exit_code == 0, second.stderr[-500:]
        two = assistant_end(second.stdout)
        # same id, same context window: the second turn's prompt carries the first exchange
        assert two["usage"]["input"] > one["usage"]["input"]
        sessions = vm.run("cat ~/.sbx-adw/sessions/*.jsonl")
        assert sessions.exit_code == 0
        assert "Reply with ping" in sessions.stdout and "Now reply with ping again" in sessions.stdout
    finally:
        pool.close()


def test_pi_0_73_1_refuses_the_adws_call_and_the_fleet_says_so(tmp_path: Path) -> None:
    with SimFleet(tmp_path / "fleet", runs=1, pi_version="0.73.1") as fleet:
        assert fleet.pi is not None
        assert "pi 0.73.1 has no --session-id" in fleet.pi.describe()
        assert "which the SSSF ADWs pass" in fleet.pi.describe()
        pool = vm_pool(fleet)
        try:
            refused = pool.host(f"{fleet.run_ids[0]}.exe.xyz").run(adw_pi_call("Reply with ping"))
        finally:
            pool.close()
    assert refused.exit_code == 1 and refused.stdout == ""
    assert refused.stderr.strip() == "Error: Unknown option: --session-id"


# The ADWs import python-dotenv for load_dotenv() only; the VM's models.json carries the runtime key, so a
# stand-in that loads nothing leaves the call as the ADW makes it (the test interpreter has no dotenv).
DRIVER = """
import json, pathlib, sys, types
sys.modules.setdefault("dotenv", types.SimpleNamespace(load_dotenv=lambda *a, **k: False))
sys.path.insert(0, {adws!r})
from adw_modules import agent_pi
from adw_modules.data_types import PiRequest
home = pathlib.Path.home()
request = PiRequest(
    prompt="Reply with ping", system_prompt="You are the planner. Answer in one line.",
    model="openrouter/{model}", thinking="medium", session_id={session!r},
    session_dir=str(home / ".sbx-adw" / "real"), raw_output_path=str(home / ".sbx-adw" / "raw.jsonl"),
    tools=["read", "bash"], cwd=str(home / "app"),
)
first = agent_pi.run(request)
second = agent_pi.run(request.model_copy(update={{"prompt": "Now reply with ping again"}}))
print(json.dumps({{"first": first.model_dump(), "second": second.model_dump()}}))
"""


@pytest.mark.skipif(inkwell_absent() is not None, reason=inkwell_absent() or "")
def test_the_real_agent_pi_runs_its_agent_on_a_vm(default_fleet: SimFleet) -> None:
    """The checkout's agent_pi.run (resolve_model reads `pi --list-models`' stdout, then the --session-id call)."""
    checkout = inkwell_checkout()
    assert checkout is not None
    driver = DRIVER.format(adws=str(checkout / "adws"), model=MODEL, session=SESSION_ID + "-real")
    pool = vm_pool(default_fleet)
    try:
        vm = pool.host(f"{default_fleet.run_ids[0]}.exe.xyz")
        # -B: nothing written into the checkout; the interpreter is the one with pydantic (the ADWs' uv env)
        done = vm.run(f"cd ~/app && {shlex.quote(sys.executable)} -B -", stdin=driver)
    finally:
        pool.close()
    assert done.exit_code == 0, done.stderr[-1500:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    first, second = results["first"], results["second"]
    assert first["returncode"] == 0 and first["session_id"] == SESSION_ID + "-real" and first["cost"] > 0
    assert first["text"].strip() and second["returncode"] == 0
    assert second["context_tokens"] > first["context_tokens"]  # the same session continued


@pytest.mark.skipif(inkwell_absent() is not None, reason=inkwell_absent() or "")
def test_a_fleet_on_the_real_recipes_says_when_its_pi_cannot_run_the_adws(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    checkout = inkwell_checkout()
    with SimFleet(tmp_path / "fleet", runs=1, sssf_checkout=checkout, pi_version="0.73.1"):
        said = capfd.readouterr().err
    assert (
        "sbxcheck sim: pi 0.73.1 has no --session-id (pi has it from 0.76.0), which the SSSF ADWs pass: their pi "
        "calls fail 'Unknown option: --session-id' on these VMs (--sbx-sim-pi-version 0.83.0 is the exe.dev "
        "image's); adws/adw_modules/agent_pi.py passes it\n"
    ) in said
    with SimFleet(tmp_path / "default", runs=1, sssf_checkout=checkout):
        assert "--session-id" not in capfd.readouterr().err
