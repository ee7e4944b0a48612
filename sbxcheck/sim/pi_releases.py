"""The pi releases a simulated VM can run, and what differs between them, as each package's own files have it.

pi is ``@mariozechner/pi-coding-agent`` up to 0.73.1 and ``@earendil-works/pi-coding-agent`` from 0.74.0
(``npm view … versions``). The exe.dev image ships 0.83.0 (inkwell ``ai_docs/exedev_sandbox_mounting.md``,
"Present: pi 0.83.0"), so that is what a simulated VM runs unless ``--sbx-sim-pi-version`` says otherwise.
Facts below were read from the npm tarballs (``npm install --prefix DIR <package>@<version>``; the git
mirror badlogic/pi-mono stops at v0.58.3) and checked by running each against the OpenRouter double
(``tests/integration/test_sim_pi.py`` asserts them per release):

=================================  =========  =========  =========  ==============================================
fact                               0.73.1     0.83.0     1.6.0      source (file of the package, release)
=================================  =========  =========  =========  ==============================================
``engines.node``                   >=20.6.0   >=22.19.0  >=22.19.0  ``package.json``
``--version``/``--list-models``    stderr     stdout     stdout     ``dist/main.js``: ``takeOverStdout()`` sends
without a TTY print on                                              stdout to stderr outside interactive mode;
                                                                    from 0.79.1 ``isPlainRuntimeMetadataCommand``
                                                                    keeps ``--list-models`` on stdout and
                                                                    ``--version`` answers before the takeover
``--session-id <id>``              no         yes        yes        ``dist/cli/args.js``; CHANGELOG [0.76.0]
                                   (exit 1:                         "Added ``--session-id``"
                                   Unknown
                                   option)
"Warning: errors loading           stderr     stderr     stderr     ``dist/cli/list-models.js`` (``console.error``)
models.json" + drops every
custom model (partial cost)
OpenRouter's billed ``usage.cost`` no         no         yes        pi-ai ``dist/utils/openrouter-cost.js``
becomes ``cost.total``                                              (``applyOpenRouterReportedCost``, pi-ai 1.5.0;
(``cost.totalFromProvider``)                                        ``is_byok: false``); the per-component costs
                                                                    stay models.json rate × tokens
``~/.pi/agent/models.json``        same       same       same       ``docs/models.md``; 1.6.0
``providers.<p>.{baseUrl, api,                                      ``schemas/models.schema.json`` still requires
apiKey, models[{id, cost{input,                                     input/output/cacheRead/cacheWrite in a cost
output, cacheRead, cacheWrite}}]}``                                 block
=================================  =========  =========  =========  ==============================================

Releases between: the provider's cost comes with pi-ai 1.5.0. coding-agent 0.x pins its pi-ai in
``npm-shrinkwrap.json``; 1.0.3 has no shrinkwrap and asks for ``@earendil-works/pi-ai ^1.0.3``, so an
install today resolves the newest 1.x pi-ai and reports the provider's cost; 1.3.0 and 1.4.0 pin pi-ai to
their own version (without it); 1.5.0 on pin one with it. ``pi -p --mode json`` prints the same event types
in all three (``session``, ``agent_start``, ``turn_start``, ``message_start``/``message_update``/
``message_end``, ``turn_end``, ``agent_end``); 0.83.0 adds ``agent_settled`` and ``usage.reasoning``,
1.6.0 a leading ``message_end`` of role ``system``, ``durationMs`` and ``thinkingLevel`` on messages, and
``message_update`` events carrying ``usage`` instead of the whole ``message``. ``apiKey`` values: 0.73.1
takes a bare name as an environment variable; 0.83.0 on take ``$NAME``/``${NAME}`` and a bare name
literally (``docs/models.md``, "Value Resolution").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sbxcheck.errors import SimError

#: The pi the exe.dev image ships (inkwell ai_docs/exedev_sandbox_mounting.md): what simulated VMs run.
DEFAULT_PI_VERSION = "0.83.0"
#: The releases the test suite runs the gate on (tests/integration/test_gate_pi_releases.py).
TESTED_PI_VERSIONS = ("0.73.1", "0.83.0", "1.6.0")
LAST_MARIOZECHNER = (0, 73, 1)
SESSION_ID_SINCE = (0, 76, 0)
PLAIN_STDOUT_SINCE = (0, 79, 1)
_VERSION_RE = re.compile(r"(\d{1,4})\.(\d{1,4})\.(\d{1,4})")


@dataclass(frozen=True)
class PiRelease:
    """One pi release: its npm package and what a gate or an ADW meets on it (see the module's table)."""

    version: str

    @property
    def numbers(self) -> tuple[int, int, int]:
        major, minor, patch = (int(n) for n in self.version.split("."))
        return major, minor, patch

    @property
    def package(self) -> str:
        if self.numbers <= LAST_MARIOZECHNER:
            return "@mariozechner/pi-coding-agent"
        return "@earendil-works/pi-coding-agent"

    @property
    def spec(self) -> str:
        """What npm installs: ``<package>@<version>``."""
        return f"{self.package}@{self.version}"

    @property
    def key(self) -> str:
        """The install's name in the cache: package scope and version (``pi-earendil-works-0.83.0``)."""
        scope = self.package.split("/")[0].lstrip("@")
        return f"pi-{scope}-{self.version}"

    @property
    def has_session_id(self) -> bool:
        return self.numbers >= SESSION_ID_SINCE

    @property
    def metadata_stream(self) -> str:
        """Where ``--version`` and ``--list-models`` print when stdin is not a TTY."""
        return "stdout" if self.numbers >= PLAIN_STDOUT_SINCE else "stderr"

    @property
    def reports_provider_cost(self) -> bool:
        """Whether pi takes OpenRouter's billed ``usage.cost`` as its total (``cost.totalFromProvider``)."""
        return self.numbers >= (1, 5, 0) or (1, 0, 0) <= self.numbers < (1, 3, 0)

    def caveat(self) -> str:
        """What this release cannot do that the SSSF factory needs, or ""."""
        if self.has_session_id:
            return ""
        return (
            f"pi {self.version} has no --session-id (pi has it from "
            f"{'.'.join(map(str, SESSION_ID_SINCE))}), which the SSSF ADWs pass: their pi calls fail "
            f"'Unknown option: --session-id' on these VMs (--sbx-sim-pi-version {DEFAULT_PI_VERSION} is the "
            "exe.dev image's)"
        )


def pi_release(version: str | None = None) -> PiRelease:
    """The release ``version`` names (None: the exe.dev image's); SimError when it is not ``MAJOR.MINOR.PATCH``."""
    if version is None:
        return PiRelease(DEFAULT_PI_VERSION)
    value = version.strip().removeprefix("v")
    if not _VERSION_RE.fullmatch(value):
        raise SimError(
            f"pi version {version!r}: expected a release such as {DEFAULT_PI_VERSION} (MAJOR.MINOR.PATCH; "
            f"tested: {', '.join(TESTED_PI_VERSIONS)})"
        )
    return PiRelease(".".join(str(int(n)) for n in value.split(".")))


def node_requirement(engines: str) -> tuple[int, int, int] | None:
    """The lowest node an ``engines.node`` range accepts (``>=22.19.0``, ``^20.6``), or None when not that simple."""
    match = re.fullmatch(r"\s*(?:>=|\^|~)?\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?\s*", engines)
    if match is None:
        return None
    major, minor, patch = (int(part) if part else 0 for part in match.groups())
    return major, minor, patch
