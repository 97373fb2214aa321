"""Who is looking: the explorer's principal from a browser, with the API's own token table.

A browser cannot send `Authorization: Bearer`, so `/ui/login` takes the token in a form and opens a
**server-side session**: the cookie holds a random session id (256 bits), never the token; the service keeps,
under the id's SHA-256, the principal the token authenticated and when the session ends (`SESSION_TTL`, 12
hours after sign-in). Signing out ends it on the server (the old cookie is worth nothing after it), so
does its expiry, and so does a restart of the service (sessions live in this process: sign in again; with
several recall processes behind one name, each has its own). At most `MAX_SESSIONS` are kept; the oldest go
first. The cookie is HttpOnly, SameSite=Strict, scoped to `/ui`, with Max-Age, and `Secure` unless the page
was asked over plain http of a loopback name (where a browser would not send a Secure cookie back, and the
traffic never leaves the host); behind a TLS proxy say `X-Forwarded-Proto: https` or serve https. Signing in
over plain http beyond loopback is refused with a page that says so (the cookie would not come back).

Every page reads it back and authenticates it (`principal`); an `Authorization` header is honoured too
(scripts, curl), and then the request carries no cookie at all. With no tokens file the service is open, on
loopback only (`recall.app.check_bind`), and every caller is `OPEN`, as on the API.

**CSRF.** Every form that sends something carries a token, an HMAC under a key made at start-up of what ties
the form to this browser: the session id once signed in; before that (the login form, and the open service
which has no sessions) a random browser id set in its own HttpOnly, SameSite=Strict cookie on the first page.
So the login form, sign-out, replay and forget all check one (`check_csrf`), another site can neither read nor
forge it, and a request whose browser says it came from another site (`Sec-Fetch-Site: cross-site`) is
refused as well. Values are compared as bytes: a token with characters beyond ASCII is refused, not a 500.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import Response

from episodic.kernel.auth import OPEN, AuthError, Principal, TokenTable

COOKIE = "episodic_ui_session"
BROWSER = "episodic_ui_browser"  # the browser's id before it signs in (and on the open service): a CSRF seed
COOKIE_PATH = "/ui"
SESSION_TTL = 12 * 3600.0
MAX_SESSIONS = 10_000


class LoginNeeded(Exception):
    """No usable session on a service with tokens: the page sends the browser to /ui/login."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CsrfRefused(Exception):
    """A form without this browser's CSRF token, or sent from another site."""


@dataclass(frozen=True, slots=True)
class Opened:
    principal: Principal
    ends: float  # monotonic


def _digest(sid: str) -> str:
    return hashlib.sha256(sid.encode("utf-8", "surrogatepass")).hexdigest()


def loopback_request(request: Request) -> bool:
    """Whether the page was asked of a loopback name (localhost, 127.x.y.z, [::1])."""
    host = (request.url.hostname or "").strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def over_https(request: Request) -> bool:
    """The page was asked over https (here, or at a TLS proxy that says so)."""
    return request.url.scheme == "https" or request.headers.get("x-forwarded-proto", "").lower() == "https"


def secure_cookie(request: Request) -> bool:
    """`Secure` unless the request is plain http of a loopback name (see the module doc)."""
    return over_https(request) or not loopback_request(request)


class Session:
    """The explorer's view of auth: one per app (its CSRF key and its sessions live as long as the process)."""

    def __init__(self, tokens: TokenTable | None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.tokens = tokens
        self.clock = clock
        self._key = secrets.token_bytes(32)
        self._open: OrderedDict[str, Opened] = OrderedDict()  # sha256(session id) -> the session
        self._lock = threading.Lock()

    @property
    def open(self) -> bool:
        return self.tokens is None

    # -- sessions ------------------------------------------------------------------------------------------
    def _session(self, sid: str | None) -> Opened | None:
        if not sid:
            return None
        key = _digest(sid)
        with self._lock:
            found = self._open.get(key)
            if found is not None and found.ends <= self.clock():
                del self._open[key]
                return None
            return found

    def principal(self, request: Request) -> Principal:
        """The caller, or LoginNeeded. An `Authorization` header is honoured too (scripts, curl)."""
        if self.tokens is None:
            return OPEN
        header = request.headers.get("authorization")
        if header:
            return self.tokens.authenticate(header)
        sid = request.cookies.get(COOKIE)
        if not sid:
            raise LoginNeeded("sign in with a token of this service")
        found = self._session(sid)
        if found is None:
            raise LoginNeeded("the session has ended (signed out, expired, or the service restarted): sign in again")
        return found.principal

    def login(self, token: str) -> tuple[Principal, str]:
        """The principal of a token typed into the login form and a new session id for it; AuthError when
        it is not a token of this service."""
        if self.tokens is None:
            return OPEN, ""
        token = token.strip()
        if not token or any(c.isspace() for c in token):
            raise AuthError("invalid", "token: paste the bearer token itself (no spaces)")
        principal = self.tokens.authenticate(f"Bearer {token}")
        sid = secrets.token_urlsafe(32)
        with self._lock:
            self._open[_digest(sid)] = Opened(principal, self.clock() + SESSION_TTL)
            while len(self._open) > MAX_SESSIONS:
                self._open.popitem(last=False)
        return principal, sid

    def logout(self, request: Request) -> None:
        """End the request's session on the server (its cookie is worth nothing after this)."""
        sid = request.cookies.get(COOKIE)
        if sid:
            with self._lock:
                self._open.pop(_digest(sid), None)

    def set_session(self, response: Response, request: Request, sid: str) -> None:
        response.set_cookie(COOKIE, sid, max_age=int(SESSION_TTL), path=COOKIE_PATH, httponly=True,
                            samesite="strict", secure=secure_cookie(request))  # fmt: skip

    def clear_session(self, response: Response, request: Request) -> None:
        response.delete_cookie(COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict",
                               secure=secure_cookie(request))  # fmt: skip

    # -- CSRF ----------------------------------------------------------------------------------------------
    def browser_id(self, request: Request) -> str | None:
        return request.cookies.get(BROWSER) or getattr(request.state, "new_browser_id", None)

    def ensure_browser(self, request: Request, response: Response) -> None:
        """Give the browser its id cookie when it has none (made for this request by `csrf`)."""
        new = getattr(request.state, "new_browser_id", None)
        if new and not request.cookies.get(BROWSER):
            response.set_cookie(BROWSER, new, path=COOKIE_PATH, httponly=True, samesite="strict",
                                secure=secure_cookie(request))  # fmt: skip

    def _seed(self, request: Request) -> str:
        header = request.headers.get("authorization")
        if header:
            return "header:" + header
        sid = request.cookies.get(COOKIE)
        if sid and self._session(sid) is not None:
            return "session:" + sid
        browser = self.browser_id(request)
        if not browser:
            browser = secrets.token_urlsafe(24)
            request.state.new_browser_id = browser
        return "browser:" + browser

    def csrf(self, request: Request) -> str:
        """The CSRF token of this browser's forms (see the module doc)."""
        return hmac.new(self._key, self._seed(request).encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()

    def check_csrf(self, request: Request, sent: str | None) -> None:
        if request.headers.get("sec-fetch-site") == "cross-site":
            raise CsrfRefused("refused: this form was sent from another site")
        expected = self.csrf(request).encode()
        if not sent or not hmac.compare_digest(sent.encode("utf-8", "surrogatepass"), expected):
            raise CsrfRefused("refused: the form is stale or was not made by this explorer (reload the page)")
