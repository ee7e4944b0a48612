"""Checks of an observed SSSF run: the app and the trace UI answer as the spec says.

``observe`` records ``ports`` and promises the app (``https://<vm>/``: 200 anonymously) and the trace
UI (``https://<vm>:<obs>/``: anything but 000 or ≥ 500; 307/401 is correct there). The inventory's
``[sssf] observe_probe`` says how they are reached: ``https`` from this host as a user would
(:func:`probe_https`), or ``vm``: curl inside the VM on its local ports (:func:`curl_script`). Ports are
always the record's, never assumed. Each check is a probe plus a pure judge (:func:`judge_observe_app`,
:func:`judge_observe_obs`), as in :mod:`sbxcheck.checks.gate`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from sbxcheck.checks.base import RemoteShell, trim
from sbxcheck.checks.gate import GateTarget, lifecycle_command, ssh_login, ssh_login_words
from sbxcheck.checks.script import (
    MAKE_TMPDIR,
    NEED_CURL,
    PRELUDE,
    GateScript,
    ScriptRun,
    content_lines,
    run_script,
    script_failure,
    section,
)
from sbxcheck.commands import commands, on_host
from sbxcheck.results import CheckResult, Classification, Outcome

__all__ = [
    "BODY_CHARS",
    "HttpProbe",
    "check_observe_app",
    "check_observe_obs",
    "curl_script",
    "judge_observe_app",
    "judge_observe_obs",
    "observe_ports",
    "observe_precondition",
    "observe_url",
    "parse_curl",
    "probe_https",
]

BODY_CHARS = 1500
# A 200 that is a proxy's or server's error page is not the app (checked on the first BODY_CHARS).
ERROR_PAGE_RE = re.compile(
    r"<title>[^<]*\b(?:error|bad gateway|unavailable|not found|50[0-4])\b|\bbad gateway\b|"
    r"\bupstream connect error\b|\bno healthy upstream\b|\bconnection refused\b|\bservice unavailable\b",
    re.I,
)

_CURL_SCRIPT = (
    PRELUDE
    + NEED_CURL
    + MAKE_TMPDIR
    + r"""
code=$(curl -q -sS --noproxy '*' -o "$sbx_tmp/body" -D "$sbx_tmp/headers" --max-time "$2" -w '%{http_code}' "$1" \
       2>"$sbx_tmp/err")
rc=$?
echo "SBX_CURL_RC $rc"
echo "SBX_HTTP ${code:-000}"
loc=$(grep -i '^location:' "$sbx_tmp/headers" 2>/dev/null | head -n 1 | tr -d '\r' | cut -c1-300)
echo "SBX_LOCATION ${loc#*: }"
echo "SBX_BODY_BEGIN"
head -c "$3" "$sbx_tmp/body" 2>/dev/null | sed 's/^/| /'
echo; echo "SBX_BODY_END"
echo "SBX_ERR_BEGIN"
head -c 300 "$sbx_tmp/err" 2>/dev/null | sed 's/^/| /'
echo; echo "SBX_ERR_END"
echo "SBX_END"
"""
)


@dataclass(frozen=True)
class HttpProbe:
    """One anonymous GET (no redirect followed): status 0 when nothing answered."""

    url: str
    via: str  # "https from this host" or "curl on <vm>"
    status: int
    error: str = ""
    body: str = ""
    location: str = ""


def observe_ports(ports: Any) -> tuple[int, int] | str:
    """``(app, obs)`` from the record's ``ports``, or why they cannot be used."""
    if not isinstance(ports, dict):
        return f"the record's ports is {type(ports).__name__} {trim(str(ports), 80)}, not {{\"app\": N, \"obs\": M}}"
    values = []
    for name in ("app", "obs"):
        value = ports.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
            return f"the record's ports.{name} is {trim(repr(value), 40)}, not a port number"
        values.append(value)
    return values[0], values[1]


def observe_url(target: GateTarget, which: str, port: int) -> str:
    """The URL a check probes: the public one (``observe_probe = "https"``) or the VM's local port."""
    if target.observe_probe == "vm":
        return f"http://127.0.0.1:{port}/"
    base = (target.https_url or f"https://{target.host}").rstrip("/")
    if which == "app":
        return base + "/"
    host = urlsplit(base).hostname or target.host
    return f"https://{host}:{port}/"


def curl_script(target: GateTarget, url: str) -> GateScript:
    seconds = str(max(1, int(target.observe_timeout_s)))
    return GateScript(
        _CURL_SCRIPT,
        (url, seconds, str(BODY_CHARS)),
        target.observe_timeout_s + 30,
        f"curl -sS --max-time {seconds} {url} (on the VM, no redirect followed)",
    )


def parse_curl(url: str, run: ScriptRun) -> HttpProbe | None:
    """The probe from the VM's curl script, or None when its output is not the script's."""
    lines = run.stdout.splitlines()
    rc = next((ln.split()[1] for ln in lines if re.fullmatch(r"SBX_CURL_RC \d{1,3}", ln)), None)
    code = next((ln.split()[1] for ln in lines if re.fullmatch(r"SBX_HTTP \d{3}", ln)), None)
    if rc is None or code is None:
        return None
    location = next((ln[len("SBX_LOCATION ") :] for ln in lines if ln.startswith("SBX_LOCATION ")), "")
    body = "\n".join(content_lines(section(lines, "SBX_BODY_BEGIN", "SBX_BODY_END") or []))
    err = " ".join(content_lines(section(lines, "SBX_ERR_BEGIN", "SBX_ERR_END") or [])).strip()
    error = f"curl exit {rc}: {err}" if rc != "0" else ""
    return HttpProbe(url, f"curl on {run.host}", int(code), error, body, location.strip())


def probe_https(url: str, timeout_s: float) -> HttpProbe:
    """An anonymous GET from this host, as a user would (no redirect followed, body capped, bounded)."""
    import httpx

    from sbxcheck.errors import SbxError
    from sbxcheck.transports.http import get_start

    via = "https from this host"
    try:
        resp = get_start(url, timeout_s=timeout_s, max_bytes=BODY_CHARS)
    except (httpx.HTTPError, SbxError) as exc:  # the deadline; a body in an encoding not read
        return HttpProbe(url, via, 0, f"{type(exc).__name__}: {exc}")
    body = resp.content.decode("utf-8", errors="replace")
    return HttpProbe(url, via, resp.status_code, "", body, resp.headers.get("location", "")[:300])


def _probe(shell: RemoteShell, target: GateTarget, url: str) -> HttpProbe | ScriptRun:
    if target.observe_probe != "vm":
        return probe_https(url, target.observe_timeout_s)
    run = run_script(shell, curl_script(target, url))
    return parse_curl(url, run) or run


def _probe_evidence(probe: HttpProbe, which: str, port: int) -> dict[str, Any]:
    ev: dict[str, Any] = {"url": probe.url, "via": probe.via, f"{which}_port": port, "http_status": probe.status}
    if probe.error:
        ev["error"] = trim(probe.error, 300)
    if probe.location:
        ev["location"] = trim(probe.location, 300)
    if probe.body:
        ev["body_excerpt"] = trim(probe.body.strip(), 300)
    return ev


def _observe_again(target: GateTarget, what: str, log: str) -> dict[str, Any]:
    """The next step of a service that does not serve: observe again, else its log (``log``: one of
    sbxcheck's own paths, a template word)."""
    return {
        "recommendation": (
            f"{what}: `just sbx lifecycle observe {target.run_id}` starts it again if it is down (idempotent); if "
            f"it stays down, read its log on the VM (`{ssh_login(target)} 'tail -n 50 {log}'`). Nothing was changed"
        ),
        "commands": commands(
            lifecycle_command("observe", target.run_id), on_host(ssh_login_words(target), f"tail -n 50 {log}")
        ),
    }


def judge_observe_app(target: GateTarget, probe: HttpProbe, port: int) -> CheckResult:
    """The app answers 200, anonymously, with a page that is not an error page."""
    check, tgt = "observe_app", target.run_id
    ev = _probe_evidence(probe, "app", port)
    shown = f"{probe.url} ({probe.via})"
    advice = _observe_again(target, f"the app of {target.run_id} is not serving", "~/inkwell-app.log")
    cause = f"app-down:{target.run_id}"
    if probe.status == 0:
        why = probe.error or "no answer"
        return CheckResult.failed(
            check, tgt, f"the app does not answer at {shown}: {trim(why, 200)} (HTTP 000)", ev,
            cause=cause, **advice,
        )  # fmt: skip
    if probe.status != 200:
        where = f" (redirect to {trim(probe.location, 100)})" if probe.location else ""
        return CheckResult.failed(
            check, tgt, f"the app answered HTTP {probe.status} anonymously at {shown}{where}; it must be 200",
            ev, cause=cause, **advice,
        )  # fmt: skip
    if not probe.body.strip():
        return CheckResult.failed(
            check, tgt, f"the app answered 200 with an empty body at {shown}", ev, cause=cause, **advice
        )
    if ERROR_PAGE_RE.search(probe.body[:BODY_CHARS]):
        return CheckResult.failed(
            check, tgt, f"the app answered 200 with an error page at {shown}: {trim(probe.body.strip(), 120)}",
            ev, cause=cause, **advice,
        )  # fmt: skip
    return CheckResult.passed(check, tgt, f"the app answered 200 anonymously at {shown}", ev)


def judge_observe_obs(target: GateTarget, probe: HttpProbe, port: int) -> CheckResult:
    """The trace UI answers anything but 000 or ≥ 500 (307 or 401 is correct there)."""
    check, tgt = "observe_obs", target.run_id
    ev = _probe_evidence(probe, "obs", port)
    shown = f"{probe.url} ({probe.via})"
    advice = _observe_again(
        target,
        f"the trace UI of {target.run_id} is not serving (it exits without ~/app/adws/adw_data/sssf.db)",
        "~/sssf-visualizer.log",
    )
    if probe.status == 0 or probe.status >= 500:
        why = f": {trim(probe.error, 200)}" if probe.error else ""
        return CheckResult.failed(
            check, tgt, f"the trace UI answered HTTP {probe.status:03d} at {shown}{why}; anything but 000 or ≥ 500 "
            "passes", ev, cause=f"obs-down:{target.run_id}", **advice,
        )  # fmt: skip
    note = ""
    if probe.status in (301, 302, 303, 307, 308, 401):
        note = " (correct there: it asks for a login)"
        if target.observe_probe != "vm":  # the evidence says what this pass cannot tell
            ev["note"] = (
                "behind the VM's HTTPS proxy a login answer does not prove the trace UI runs; "
                '[sssf] observe_probe = "vm" probes its port itself'
            )
    ev["rule"] = "anything but 000 or >= 500"
    return CheckResult.passed(check, tgt, f"the trace UI answered HTTP {probe.status} at {shown}{note}", ev)


def observe_precondition(target: GateTarget, check: str) -> CheckResult | None:
    """A skip when an observe check's run has not been observed (its record has no ports); else None."""
    if check in ("observe_app", "observe_obs") and target.ports is None:
        run = target.run_id
        return CheckResult(
            check=check,
            target=run,
            outcome=Outcome.SKIPPED,
            message=f"not observed: the run record of {run} has no ports (`just sbx lifecycle observe {run}` "
            "records them)",
        )
    return None


def _observe(shell: RemoteShell, target: GateTarget, which: str) -> CheckResult:
    check = f"observe_{which}"
    if (skip := observe_precondition(target, check)) is not None:
        return skip
    ports = observe_ports(target.ports)
    if isinstance(ports, str):
        return CheckResult.errored(
            check, target.run_id, f"{ports}: cannot tell which port is the {which}",
            Classification.BAD_RESPONSE, {"ports": trim(str(target.ports), 200)},
            recommendation=f"`just sbx lifecycle observe {target.run_id}` records ports as {{\"app\": N, \"obs\": M}}",
            commands=commands(lifecycle_command("observe", target.run_id)),
        )  # fmt: skip
    port = ports[0] if which == "app" else ports[1]
    url = observe_url(target, which, port)
    probe = _probe(shell, target, url)
    if isinstance(probe, ScriptRun):
        ev: dict[str, Any] = {"host": probe.host, "url": url, "exit_code": probe.exit_code}
        if (failure := script_failure(check, target.run_id, probe, ev)) is not None:
            return failure
        ev["stdout"] = trim(probe.stdout, 500)
        if "SBX_NOCURL" in probe.stdout.splitlines():
            return CheckResult.errored(
                check, target.run_id, f"curl is not installed on {probe.host}: cannot probe {url}",
                Classification.CONFIG_DEFECT, ev,
            )  # fmt: skip
        return CheckResult.errored(check, target.run_id, "unexpected output from the curl probe",
                                   Classification.BAD_RESPONSE, ev)  # fmt: skip
    judge = judge_observe_app if which == "app" else judge_observe_obs
    return judge(target, probe, port)


def check_observe_app(shell: RemoteShell, target: GateTarget) -> CheckResult:
    """observe's app: HTTP 200 anonymously (over HTTPS, or the VM's local port per the inventory)."""
    return _observe(shell, target, "app")


def check_observe_obs(shell: RemoteShell, target: GateTarget) -> CheckResult:
    """observe's trace UI: anything but 000 or ≥ 500."""
    return _observe(shell, target, "obs")
