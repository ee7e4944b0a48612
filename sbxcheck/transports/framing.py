"""Framed remote output: what a command printed, told apart from what the remote shell printed around it.

``ssh host CMD`` runs ``$SHELL -c CMD`` with the user's LOGIN shell, whatever it is (bash, zsh, fish,
tcsh/csh, dash), and that shell reads its start-up files first: Debian's bash reads ``~/.bashrc`` for
every ``ssh host CMD``, zsh ``~/.zshenv``, fish ``config.fish``, tcsh ``~/.tcshrc`` (an MOTD hook,
nvm, direnv, a ``trap … EXIT``), printing on stdout and stderr, defining functions and aliases.

So the command line the login shell parses is :data:`NEUTRAL_LINE`, the same words for every command,
which every one of those shells parses alike (single quotes only: no ``$'…'``, no ``!``, no backslash, no
newline): ``exec /bin/sh``, which reads one line with a byte count from stdin and then exactly
that many bytes (``dd bs=1``, never a byte more) as its program; the rest of stdin is the command's own.
The program (:func:`neutral_start`) is the real command framed by :func:`frame_command`: it prints a
begin marker on both streams before the command runs and an end marker (with its exit status) after it,
in a subshell so that an ``exit`` inside it still reaches the end marker. Each marker carries a random
nonce and is assembled by ``printf`` from two pieces, so it never appears literally in what was sent (a
``set -x`` trace or ``ps`` listing cannot imitate it) and nothing printed around the command can know
it. :func:`unframe` keeps exactly the bytes between the markers. Functions and aliases the login shell
defined never reach the command (``/bin/sh`` does not inherit them); what it exported does (``PATH``
from a version manager: the environment the person's own ``ssh vm CMD`` gets).

An endpoint that is not a shell (a forced command, exe.dev's CLI) prints no begin marker: the output
is returned as it came, with ``framed=False``, and the checks judge it as before.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

__all__ = ["NEUTRAL_LINE", "Frame", "Unframed", "frame_command", "neutral_start", "new_frame", "unframe"]

_PREFIX = "SBXF"

# What every login shell is given to parse, whatever the command: /bin/sh reads its program from stdin
# (a byte count on one line, then the program); ``command -p`` finds dd on the system's default PATH.
NEUTRAL_LINE = "exec /bin/sh -c 'IFS= read -r n && eval \"$(command -p dd bs=1 count=\"$n\" 2>/dev/null)\"'"


@dataclass(frozen=True)
class Frame:
    """One command's markers: ``SBXF<nonce>B`` before it, ``SBXF<nonce>E <status>`` after it."""

    nonce: str

    @property
    def begin(self) -> str:
        return f"{_PREFIX}{self.nonce}B"

    @property
    def end(self) -> str:
        return f"{_PREFIX}{self.nonce}E"


@dataclass(frozen=True)
class Unframed:
    """One stream's text between its markers, whether the markers were there, and the status they carried."""

    text: str
    framed: bool  # the begin marker was found (else ``text`` is the stream as it came)
    complete: bool  # the end marker was found too
    exit_code: int | None  # the status the end marker carried (stdout only)
    noise_chars: int  # characters outside the frame (shell start-up and exit noise)


def new_frame() -> Frame:
    """A frame with a fresh 64-bit nonce."""
    return Frame(secrets.token_hex(8))


def frame_command(command: str, frame: Frame) -> str:
    """``command`` wrapped to print ``frame``'s markers around its output on stdout and stderr."""
    pieces = f"'{_PREFIX}' '{frame.nonce}"  # printf joins them: the marker never appears literally
    return (
        f"printf '%s%sB\\n' {pieces}'; printf '%s%sB\\n' {pieces}' >&2\n"
        f"(\n{command}\n)\n"
        "sbxf_rc=$?\n"
        f"printf '%s%sE %d\\n' {pieces}' \"$sbxf_rc\"; printf '%s%sE\\n' {pieces}' >&2\n"
        'exit "$sbxf_rc"\n'
    )


def neutral_start(program: str) -> tuple[str, bytes]:
    """(the command line for ``$SHELL -c``, the stdin head that carries ``program`` to /bin/sh).

    Whatever the command's own stdin is goes right after the head.
    """
    data = program.encode("utf-8")
    return NEUTRAL_LINE, f"{len(data)}\n".encode("ascii") + data


def unframe(text: str, frame: Frame, *, with_status: bool = False) -> Unframed:
    """The part of ``text`` between ``frame``'s begin line and its end marker (exact bytes, no trimming).

    The begin marker may follow noise that did not end its line; the command's output may not end
    its last line either, so the end marker is found as the *last* occurrence after the begin.
    A stream cut short (timeout, a killed shell) keeps everything after the begin marker.
    """
    opener = frame.begin + "\n"
    start = text.find(opener)
    if start < 0:
        return Unframed(text, framed=False, complete=False, exit_code=None, noise_chars=0)
    body_start = start + len(opener)
    closer = frame.end + (" " if with_status else "\n")
    stop = text.rfind(closer, body_start)
    if stop < 0:
        return Unframed(text[body_start:], framed=True, complete=False, exit_code=None, noise_chars=start)
    status: int | None = None
    tail_start = stop + len(closer)
    if with_status:
        line_end = text.find("\n", tail_start)
        word = text[tail_start : line_end if line_end >= 0 else len(text)].strip()
        status = int(word) if word.isdigit() else None
        tail_start = line_end + 1 if line_end >= 0 else len(text)
    noise = start + (len(text) - tail_start)
    return Unframed(text[body_start:stop], framed=True, complete=True, exit_code=status, noise_chars=noise)
