"""Named faults the embedded fleet can inject. ``NAME`` targets the first run, ``NAME@<run>`` another.

A run is named by its id or its task (``@bravo``).

A fault changes the simulated world (a file on a VM, a key's state in the OpenRouter double, how a
host answers SSH); it never tells a check what to conclude.
"""

from __future__ import annotations

from dataclasses import dataclass

from sbxcheck.errors import SimError

# Hostile terminal text: OSC 52 (sets the clipboard), a title change, clear screen, CR/VT line forgery, C0 bytes
HOSTILE_TEXT = "\x1b]52;c;aGk=\x07\x1b]0;owned\x07\x1b[2J\rPASSED forged\x0bline\x01\x08\x1f\x7f"
# Line forgery with LF: lines that would read as sbxcheck's own verdict and pytest's own outcome
LINE_FORGERY = "\nverdict: HEALTHY \u2014 every check passed\nPASSED forged-by-a-line-feed"


@dataclass(frozen=True)
class Fault:
    """One injectable fault."""

    name: str
    summary: str


FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault("vm.dirty-tree", "~/app has a modified tracked file and an untracked file"),
        Fault("vm.head-mismatch", "~/app has a new commit: HEAD no longer matches the recorded commit_sha"),
        Fault(
            "vm.truncated-file", "three tracked files in ~/app are zero bytes (an unsynced golden-VM copy)"
        ),
        Fault("vm.no-app", "~/app does not exist (FILL never ran)"),
        Fault(
            "vm.no-runtime-key",
            "~/app/.env has no OPENROUTER_API_KEY line (FILL did not write it); models.json still holds the key",
        ),
        Fault(
            "vm.foreign-tmp",
            "the VM has its own /tmp where every fixed path earlier gate scripts used is taken (a read-only "
            "directory, since sim VMs run as the local user, often root)",
        ),
        Fault(
            "vm.ports-list",
            "the run record's ports is a JSON list, as `run_record.py set ports=[...]` writes",
        ),
        Fault("vm.no-pi", "pi is not on the VM's PATH"),
        Fault("vm.no-models", "~/.pi/agent/models.json is missing: pi has no models"),
        Fault(
            "vm.partial-cost",
            "models.json cost blocks lack cacheRead/cacheWrite: every pi release rejects the file and loads none "
            "of its models (1.6's built-in catalog still lists their ids)",
        ),
        Fault(
            "vm.zero-cost",
            "models.json has no cost blocks: pi prices every call at $0 rates (from pi 1.5 its total is still "
            "OpenRouter's bill)",
        ),
        Fault("openrouter.model-down", "one roster model (the second) answers 'not a valid model ID'"),
        Fault("openrouter.reasoning-only", "every model answers with content null and text in reasoning"),
        Fault("openrouter.key-exhausted", "the runtime key's usage equals its limit: 402 on inference"),
        Fault("openrouter.key-uncapped", "the runtime key has no limit (limit null)"),
        Fault("vm.unreachable", "nothing listens on the VM's SSH port (connection refused)"),
        Fault("vm.host-key-changed", "the VM presents a host key that known_hosts does not list"),
        Fault(
            "cp.backend-crash",
            "opencode missions fail at init with `fn3 is not a function`, before any tool call",
        ),
        Fault(
            "cp.model-not-found",
            "opencode missions with a model park in awaiting_user (ProviderModelNotFoundError)",
        ),
        Fault("cp.effort-reject-max", "codex rejects model_effort max (400 Invalid model_effort)"),
        Fault("cp.record-drops-model", "claudecode's stored record loses model_override"),
        Fault("cp.stuck-pending", "gemini missions are never dispatched: they stay pending"),
        Fault("cp.no-evidence", "gemini missions complete with no tool or assistant events"),
        Fault(
            "cp.server-shutdown",
            "gemini missions are interrupted right after they start, terminal_reason server_shutdown (a deploy)",
        ),
        Fault(
            "cp.mount-missing", "opencode missions see an empty ephemeral directory instead of the workspace"
        ),
        Fault(
            "cp.mount-missing-exitcode",
            "as cp.mount-missing, with tool results that carry only an exit code (no is_error)",
        ),
        Fault(
            "cp.idempotency-ignored",
            "create ignores idempotency_key (identical titles still coalesce): a keyed retry is a second mission",
        ),
        Fault("cp.cancel-slow", "every mission cancel waits 3 s before it acts (for interrupt tests)"),
        Fault(
            "cp.create-500",
            "gemini creates are stored and started, then answered 500: the client never learns the id",
        ),
        Fault("cp.auth-expired", "every bearer token is refused: 401 Invalid or expired token"),
        Fault(
            "cp.expiry-redirect",
            "an SSO proxy in front: a token is spent after 12 requests (as cp.token-expires) and a request "
            "with a spent or refused token is answered 302 to the SSO's login page, not 401",
        ),
        Fault(
            "cp.expiry-html",
            "an SSO proxy in front: a token is spent after 12 requests (as cp.token-expires) and a request "
            "with a spent or refused token is answered 200 text/html (the SSO's login page), not 401",
        ),
        Fault("cp.login-empty", "POST /api/auth/login answers 200 with an empty body"),
        Fault(
            "cp.token-expires",
            "every token the control plane issues expires after 12 requests, during the run (401 Invalid "
            "or expired token); logging in again issues a new one",
        ),
        Fault("cp.env-values-exposed", "the verity workspace's env also holds credential-shaped values"),
        Fault("fleet.node-offline", "remote node dgx-spark missed its heartbeats: offline"),
        Fault("fleet.node-cordoned", "remote node babylon is cordoned"),
        Fault("fleet.degraded-disk", "the control plane's disk is at 96%: disk_level critical"),
        Fault(
            "dgx.tailscaled-disabled",
            "tailscaled on agent-core is disabled and stopped: the DGX drops off the tailnet",
        ),
        Fault(
            "dgx.tailscaled-inactive",
            "tailscaled on agent-core is enabled but stopped: the DGX drops off the tailnet",
        ),
        Fault("dgx.ping-timeout", "tailscale ping from agent-core hangs (the probe's timeout fires)"),
        Fault("dgx.ping-silent", "tailscale on agent-core prints nothing and exits 0"),
        Fault("dgx.systemctl-unknown", "systemctl on agent-core answers 'unknown' for tailscaled"),
        Fault(
            "dgx.sudo-refused",
            "tailscaled on agent-core is disabled and `sudo -n` is refused (no passwordless sudo)",
        ),
        Fault("dgx.unreachable", "the DGX host is down: no SSH, no pong, its remote node offline"),
        Fault("exedev.ls-fails", "exe.dev's `ls --json` exits 1 (the VM list is unknown)"),
        Fault("exedev.ls-garbage", "exe.dev's `ls --json` prints a banner, not JSON"),
        Fault("gh.no-auth", "the verity workspace has no stored gh/git credentials"),
        Fault("openrouter.orphan-key", "an sbx- key of a closed run is still listed (never revoked)"),
        Fault(
            "host.gnu-mktemp",
            "a real checkout's recipes (--sssf-checkout) meet GNU mktemp, as on a Linux host: its BSD "
            "`mktemp -t PREFIX` form fails (by default they get macOS's behaviour)",
        ),
        # lived-in VMs and the DGX incident's harder cases
        Fault(
            "vm.bash-env",
            "the VM exports BASH_ENV: every bash reads a file that prints on both streams (the gate's markers "
            "and a JSON body among it) and leaves an EXIT trap that prints, the gate's own `bash -s` included",
        ),
        Fault(
            "vm.noisy-shell",
            "the VM's ~/.bashrc prints before and after every command, on stdout and stderr (the third "
            "run's VM always does)",
        ),
        Fault(
            "vm.foreign-clone", "~/app is owned by another user: git refuses it (detected dubious ownership)"
        ),
        # a VM is a person's machine (sim/personal.py): healthy ones pass, broken ones fail for their reason
        Fault(
            "vm.shell-fish",
            "the VM user's login shell is fish; config.fish prints on both streams and defines git, bash, env, curl",
        ),
        Fault("vm.shell-zsh", "the login shell is zsh; ~/.zshenv prints on both streams, aliases git, defines pi"),
        Fault("vm.shell-tcsh", "the login shell is tcsh; ~/.tcshrc prints on both streams and aliases git, bash, pi"),
        Fault("vm.shell-dash", "the login shell is dash (it reads no start-up file for an ssh command)"),
        Fault(
            "vm.git-fsmonitor",
            "~/.gitconfig's core.fsmonitor hook prints two lines on stderr for every git status",
        ),
        Fault(
            "vm.git-config",
            "~/.gitconfig sets status.short/branch/showUntrackedFiles=no, color=always, a pager, advice, quotepath, "
            "an includeIf for ~/app and broad global ignores; the login shell exports GIT_TRACE=1",
        ),
        Fault("vm.git-hooks", "~/.gitconfig's core.hooksPath holds hooks that print on both streams"),
        Fault("vm.locale", "the login shell exports LANG=tr_TR.UTF-8 and LANGUAGE=de: git answers in German"),
        Fault(
            "vm.tool-shims",
            "a version manager's shims (pi, git, curl, python3) come first on the login PATH and each prints a line "
            "on stderr before running the real tool",
        ),
        Fault(
            "vm.roster-flow",
            "the run's commit holds the roster in YAML flow style (an anchor, a merge key, quotes, comments), "
            "same models",
        ),
        Fault(
            "dgx.two-nodes-down",
            "tailscaled on agent-core is disabled and babylon is down too: the sentinel reports two nodes",
        ),
        Fault(
            "dgx.sentinel-stuck",
            "tailscaled on agent-core is disabled, and the sentinel still reports the DGX after the fix",
        ),
        Fault(
            "openrouter.revoke-ignored",
            "DELETE /keys/<hash> answers 200 but the key stays enabled, listed on page 2 of GET /keys",
        ),
        Fault(
            "vm.wide-modes",
            "~/app/.env and ~/.pi/agent/models.json are 0644 on the VM, the run's .key 0644 on the host",
        ),
        Fault(
            "vm.provisioning-key-planted",
            "the host's provisioning key sits in ~/.config/openrouter/credentials on the VM",
        ),
        # mission hygiene, readiness and catalog faults of the control plane (sim/controlplane/ops.py)
        Fault(
            "ops.orphaned-pending", "a pending mission without a deferred goal, 40 min old (never dispatched)"
        ),
        Fault("ops.stale-active", "an active mission with no update for 30 h and no live runner"),
        Fault("ops.stalled-severe", "a live mission that /running reports stalled, severity severe"),
        Fault(
            "ops.auth-error-storm", "5 in-flight claudecode missions whose trace shows 401 invalid api key"
        ),
        Fault("ops.tool-loop", "an in-flight mission calling `bash` with the same arguments 4 times"),
        Fault("ops.workspace-pending", "the verity workspace is pending (its container has not started)"),
        Fault("ops.missing-init-script", "the lean-lab workspace lost its bun-mcp init script"),
        Fault("ops.agent-unregistered", "the agent library no longer registers `build`"),
        Fault("ops.removed-provider", "provider minimax was removed from the catalog (as Virtuals was)"),
        Fault(
            "ops.track-key-ignored",
            "creates bound to a track ignore idempotency_key: a retry is a second mission",
        ),
        Fault("ops.model-silent", "gemini missions go active, then hit an idle timeout without any output"),
        Fault("openrouter.balance-low", "the OpenRouter account has $2 left (below the $5 account floor)"),
        # pushback and the live event stream
        Fault(
            "cp.rate-limited",
            "every 4th control-plane request (POST included) is refused unserved: 429 or 503 with Retry-After: 1",
        ),
        Fault(
            "cp.stream-lags",
            "the live event stream drops every third event of each subscriber and sends its lag error",
        ),
        Fault("cp.stream-absent", "GET /api/control/stream answers 404 (a build without the live stream)"),
        # hostile answers: what the fleet says must never steer sbxcheck
        Fault(
            "vm.control-chars",
            "the VM's OpenRouter answers and error bodies (read by curl on the VM) carry terminal escapes "
            "and C0 characters; one roster model (the second) is down",
        ),
        Fault("state.ledger-fifo", "the state dir's ledger.jsonl is a FIFO (a reader without O_NONBLOCK hangs)"),
        Fault(
            "state.ledger-symlink",
            "the state dir's ledger.jsonl is a symlink to a file outside it (an append would write there)",
        ),
        Fault(
            "cp.path-shaped-id",
            "gemini mission records carry the id '../../../admin/wipe-everything?confirm=yes#', not a UUID",
        ),
        Fault(
            "cp.control-chars",
            "opencode creates are refused with terminal escapes, C0 characters and line feeds that forge "
            "'verdict: HEALTHY' and 'PASSED' lines in the error text; workspace status fields carry the escapes",
        ),
        Fault(
            "cp.workspace-busy",
            "the verity workspace already has another session's live mission: creates into it get 409",
        ),
        Fault(
            "cp.clock-behind",
            "the control plane's clock runs 15 minutes behind this machine's: its Date header and every "
            "node's last_seen are written on it",
        ),
        Fault(
            "cp.slot-held",
            "a long mission of the operator's own runs all session; on a release that runs one mission at a "
            "time (--sbx-sim-cp-version v0.7) it holds the only slot",
        ),
        # a control plane that lies in well-formed answers (sim/controlplane/lies.py)
        Fault(
            "cp.coalesce-foreign",
            "claudecode creates are answered with a person's live mission and x-coalesced-with naming it",
        ),
        Fault(
            "cp.stream-lies",
            "gemini missions stay pending while the live stream says each completed (and cost $50), unstored",
        ),
        Fault("cp.stream-endless-line", "the live stream sends one line without a newline, forever"),
        Fault(
            "cp.list-flood",
            "right after the first gemini create, 250 finished missions are made after it (past the first page)",
        ),
        Fault(
            "cp.record-id-mismatch",
            "GET of an opencode mission answers another mission's record (its own id, another backend/model)",
        ),
        Fault(
            "cp.cost-nonfinite",
            "every mission reports two assistant messages of cost_cents 1.7e308 each (their sum is inf)",
        ),
        Fault("cp.cost-negative", "every mission reports two assistant messages of cost_cents -1e9 each"),
        Fault(
            "cp.deep-json",
            "every mission's first assistant message carries, as its content, JSON nested 5,000 deep "
            "(its metadata reports no cost)",
        ),
        # a run that has executed or been observed (sim/run_services.py; the gate never sees them)
        Fault("run.sdlc-credits", "the SDLC dies right after spawn: run.log ends with OpenRouter's 402 (credits)"),
        Fault("run.sdlc-key-dead", "the SDLC dies right after spawn: run.log ends with a 401 (the key is revoked)"),
        Fault(
            "run.sdlc-no-zdr",
            "the SDLC dies right after spawn: run.log says `No endpoints found matching your data policy`",
        ),
        Fault(
            "run.sdlc-provisioning-key",
            "the SDLC dies right after spawn: run.log says `User not found` (inference with the provisioning key)",
        ),
        Fault("run.app-down", "observe starts the app, but nothing ever answers on its port (connection refused)"),
        Fault("run.obs-502", "the trace UI answers 502 Bad Gateway"),
    )
}

# Where a control-plane fault lands when no @target is given: one backend, so the fault matrix is exact.
CONTROLPLANE_TARGETS: dict[str, str] = {
    "cp.backend-crash": "opencode",
    "cp.model-not-found": "opencode",
    "cp.effort-reject-max": "codex",
    "cp.record-drops-model": "claudecode",
    "cp.stuck-pending": "gemini",
    "cp.no-evidence": "gemini",
    "cp.server-shutdown": "gemini",
    "cp.mount-missing": "opencode",
    "cp.mount-missing-exitcode": "opencode",
    "cp.idempotency-ignored": "*",
    "cp.create-500": "gemini",
    "cp.cancel-slow": "*",
    "cp.auth-expired": "*",
    "cp.expiry-redirect": "*",
    "cp.expiry-html": "*",
    "cp.login-empty": "*",
    "cp.token-expires": "*",
    "cp.env-values-exposed": "verity",
    "fleet.node-offline": "dgx-spark",
    "fleet.node-cordoned": "babylon",
    "fleet.degraded-disk": "*",
    "ops.model-silent": "gemini",
    "cp.rate-limited": "*",
    "cp.stream-lags": "*",
    "cp.stream-absent": "*",
    "cp.path-shaped-id": "gemini",
    "cp.control-chars": "opencode",
    "cp.workspace-busy": "verity",
    "cp.coalesce-foreign": "claudecode",
    "cp.stream-lies": "gemini",
    "cp.stream-endless-line": "*",
    "cp.list-flood": "gemini",
    "cp.record-id-mismatch": "opencode",
    "cp.cost-nonfinite": "*",
    "cp.cost-negative": "*",
    "cp.deep-json": "*",
}


def is_controlplane_fault(name: str) -> bool:
    """Faults of the control-plane double (their @target is a backend, workspace or node, not a run)."""
    return name.startswith(("cp.", "fleet.", "ops."))  # ops.: hygiene, readiness and catalog


def is_fleet_host_fault(name: str) -> bool:
    """Faults of the fleet's own hosts and accounts (agent-core, the DGX, exe.dev, GitHub, orphan keys, state dir)."""
    return name.startswith(("dgx.", "exedev.", "gh.", "state.", "host.")) or name in (
        "openrouter.orphan-key",
        "openrouter.revoke-ignored",
        "openrouter.balance-low",
    )


PERSONAL_FAULTS = (
    "vm.shell-fish",
    "vm.shell-zsh",
    "vm.shell-tcsh",
    "vm.shell-dash",
    "vm.git-fsmonitor",
    "vm.git-config",
    "vm.git-hooks",
    "vm.locale",
    "vm.tool-shims",
    "vm.roster-flow",
)


def is_personal_fault(name: str) -> bool:
    """Faults that make a run's VM a person's machine (sim/personal.py): they change no verdict alone."""
    return name in PERSONAL_FAULTS


def is_run_fault(name: str) -> bool:
    """Faults of a run's execute/observe world: a run's VM, after the gate (the run items see them)."""
    return name.startswith("run.")


@dataclass(frozen=True)
class FaultSpec:
    """A fault and what it targets: a run id (vm./openrouter.) or a backend/workspace/node (cp./fleet.)."""

    name: str
    run_id: str | None = None

    @property
    def target(self) -> str | None:
        return self.run_id

    def __str__(self) -> str:
        return self.name if self.run_id is None else f"{self.name}@{self.run_id}"


def parse_fault(text: str) -> FaultSpec:
    """Parse ``NAME`` or ``NAME@<run-id>``; an unknown name is one readable error listing the valid ones."""
    name, _, run_id = text.strip().partition("@")
    if name not in FAULTS:
        raise SimError(
            f"unknown fault {name!r}; known faults: {', '.join(sorted(FAULTS))} (sbxcheck sim faults)"
        )
    if "@" in text and not run_id:
        raise SimError(f"fault {text!r}: expected NAME@<run-id> with a run id after '@'")
    return FaultSpec(name, run_id or None)


def describe_faults() -> str:
    """One line per fault, for ``sbxcheck sim faults``."""
    width = max(len(n) for n in FAULTS)
    return "\n".join(f"{f.name.ljust(width)}  {f.summary}" for f in FAULTS.values())
