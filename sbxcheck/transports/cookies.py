"""A cookie jar with a bound: a server that sets ever more cookies cannot grow every later request.

httpx keeps every cookie a server sets and sends them all back; one that set a new cookie on each
answer grew the Cookie header to 61 KB, and from then on every request was refused 431. This jar
keeps at most :data:`MAX_COOKIES` cookies of at most :data:`MAX_COOKIE_BYTES` each and
:data:`MAX_JAR_BYTES` in all; a cookie past a bound is dropped and counted (``refused``). One that
replaces a cookie already held (same domain, path and name) takes no new place.
"""

from __future__ import annotations

from http.cookiejar import Cookie, CookieJar
from typing import Any, Final

MAX_COOKIES: Final = 32
MAX_COOKIE_BYTES: Final = 4096  # name and value of one cookie (RFC 6265's minimum a client must hold)
MAX_JAR_BYTES: Final = 8192  # every cookie's name and value: a Cookie header most servers accept


def _size(cookie: Cookie) -> int:
    return len(cookie.name) + len(cookie.value or "")


class BoundedCookieJar(CookieJar):
    """A :class:`CookieJar` that refuses a cookie past its bounds (pass it as ``httpx.Client(cookies=...)``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refused = 0  # cookies dropped because a bound was reached

    def set_cookie(self, cookie: Cookie) -> None:
        """Keep ``cookie`` unless it is too large or the jar is full (then it is counted in ``refused``)."""
        with self._cookies_lock:  # type: ignore[attr-defined]  # CookieJar's own RLock
            held = list(self)
            same = [c for c in held if (c.domain, c.path, c.name) == (cookie.domain, cookie.path, cookie.name)]
            others = [c for c in held if c not in same]
            size = _size(cookie)
            full = not same and len(others) >= MAX_COOKIES  # a replacement takes no new place
            if size > MAX_COOKIE_BYTES or full or sum(map(_size, others)) + size > MAX_JAR_BYTES:
                self.refused += 1
                return
            super().set_cookie(cookie)


def refused_cookies(jar: object) -> dict[str, int]:
    """``{"cookies_refused": n}`` for evidence when ``jar`` dropped cookies, else nothing."""
    refused = getattr(jar, "refused", 0)
    return {"cookies_refused": refused} if isinstance(refused, int) and refused else {}
