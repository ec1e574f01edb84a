"""Who may use the viewer: one-time login tokens, the session cookie, and the Origin check for POSTs.

``engram open`` asks the processor (bearer-authenticated JSON, ``POST /viewer/login``) for a login URL
holding a one-time token that expires in ``LOGIN_TTL_SECONDS``. Opening it sets an HttpOnly,
SameSite=Strict cookie naming a random session id, held only in this process's memory (a restart logs
every browser out). A state-changing request must be a POST carrying the cookie and an ``Origin``
equal to the address the browser asked for, so another web page can neither read nor drive the viewer.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from http.cookies import CookieError, SimpleCookie

LOGIN_TTL_SECONDS = 120.0
SESSION_TTL_SECONDS = 12 * 3600.0
MAX_SESSIONS = 64


class Sessions:
    """One-time login tokens and the browser sessions they opened, in memory, thread-safe."""

    def __init__(self, cookie_name: str = "engram_viewer", *, login_ttl: float = LOGIN_TTL_SECONDS,
                 session_ttl: float = SESSION_TTL_SECONDS, clock=time.monotonic) -> None:
        self.cookie_name = cookie_name
        self.login_ttl = login_ttl
        self.session_ttl = session_ttl
        self._clock = clock
        self._logins: dict[str, float] = {}  # token -> expiry
        self._sessions: dict[str, float] = {}  # session id -> expiry
        self._lock = threading.Lock()

    def mint_login(self) -> str:
        """A new one-time login token."""
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._expire()
            self._logins[token] = self._clock() + self.login_ttl
        return token

    def redeem(self, token: str) -> str | None:
        """A new session id for a valid unused token (which is then spent), else None."""
        with self._lock:
            self._expire()
            match = next((t for t in self._logins if hmac.compare_digest(t.encode(), token.encode("utf-8", "replace"))),
                         None)
            if match is None:
                return None
            del self._logins[match]
            if len(self._sessions) >= MAX_SESSIONS:  # drop the oldest session rather than grow without bound
                del self._sessions[min(self._sessions, key=self._sessions.__getitem__)]
            session_id = secrets.token_urlsafe(32)
            self._sessions[session_id] = self._clock() + self.session_ttl
            return session_id

    def valid(self, cookie_header: str | None) -> bool:
        session_id = self.session_from(cookie_header)
        if session_id is None:
            return False
        with self._lock:
            self._expire()
            return any(hmac.compare_digest(s.encode(), session_id.encode("utf-8", "replace")) for s in self._sessions)

    def session_from(self, cookie_header: str | None) -> str | None:
        if not cookie_header:
            return None
        cookie: SimpleCookie = SimpleCookie()
        try:
            cookie.load(cookie_header)
        except CookieError:
            return None
        morsel = cookie.get(self.cookie_name)
        return morsel.value if morsel is not None and morsel.value else None

    def set_cookie(self, session_id: str) -> str:
        """The Set-Cookie header value: not readable by scripts, never sent with another site's requests."""
        return (f"{self.cookie_name}={session_id}; Path=/ui/; HttpOnly; SameSite=Strict; "
                f"Max-Age={int(self.session_ttl)}")

    def _expire(self) -> None:
        now = self._clock()
        for table in (self._logins, self._sessions):
            for key in [k for k, expiry in table.items() if expiry <= now]:
                del table[key]


def same_origin(origin: str | None, host: str | None, sec_fetch_site: str | None) -> bool:
    """True when a browser's POST comes from a page of this viewer (the address it asked for)."""
    if not origin or not host or origin != f"http://{host.strip()}":
        return False
    # Sec-Fetch-Site is set by the browser and cannot be forged by a page; when sent it must agree.
    return sec_fetch_site in (None, "same-origin")
