"""Who is looking: the explorer's principal from a browser, with the API's own token table.

A browser cannot send `Authorization: Bearer`, so `/ui/login` takes the token in a form and sets it in an
HttpOnly, SameSite=Strict cookie scoped to `/ui` (Secure when the request came over https); every page
reads it back and authenticates it with `TokenTable.authenticate`, the lookup the API uses, so a token
sees here exactly what its API calls may see. With no tokens file the service is open, on loopback only
(`recall.app.check_bind`), and every caller is `OPEN`, as on the API.

Forms that change something (replay, forget) carry a CSRF token: an HMAC, under a key made at start-up,
of the cookie's token (or "open"), so another site can neither read nor forge it; a request whose browser
says it came from another site (`Sec-Fetch-Site: cross-site`) is refused too. This matters most on the open
service, where no cookie stands between a hostile page and `127.0.0.1`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from fastapi import Request

from episodic.kernel.auth import OPEN, AuthError, Principal, TokenTable

COOKIE = "episodic_ui_token"
COOKIE_PATH = "/ui"


class LoginNeeded(Exception):
    """No usable token cookie on a service with tokens: the page sends the browser to /ui/login."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CsrfRefused(Exception):
    """A state-changing form without this session's CSRF token, or sent from another site."""


class Session:
    """The explorer's view of auth: one per app (its CSRF key lives as long as the process)."""

    def __init__(self, tokens: TokenTable | None) -> None:
        self.tokens = tokens
        self._key = secrets.token_bytes(32)

    @property
    def open(self) -> bool:
        return self.tokens is None

    def principal(self, request: Request) -> Principal:
        """The caller, or LoginNeeded. An `Authorization` header is honoured too (scripts, curl)."""
        if self.tokens is None:
            return OPEN
        header = request.headers.get("authorization")
        if header:
            return self.tokens.authenticate(header)
        token = request.cookies.get(COOKIE)
        if not token:
            raise LoginNeeded("sign in with a token of this service")
        try:
            return self.tokens.authenticate(f"Bearer {token}")
        except AuthError as e:
            raise LoginNeeded("the saved token is no longer valid: sign in again") from e

    def login(self, token: str) -> Principal:
        """The principal of a token typed into the login form; AuthError when it is not one."""
        if self.tokens is None:
            return OPEN
        token = token.strip()
        if not token or any(c.isspace() for c in token):
            raise AuthError("invalid", "token: paste the bearer token itself (no spaces)")
        return self.tokens.authenticate(f"Bearer {token}")

    def csrf(self, request: Request) -> str:
        seed = request.cookies.get(COOKIE) or request.headers.get("authorization") or "open"
        return hmac.new(self._key, seed.encode(), hashlib.sha256).hexdigest()

    def check_csrf(self, request: Request, sent: str | None) -> None:
        if request.headers.get("sec-fetch-site") == "cross-site":
            raise CsrfRefused("refused: this form was sent from another site")
        if not sent or not hmac.compare_digest(sent, self.csrf(request)):
            raise CsrfRefused("refused: the form is stale or was not made by this explorer (reload the page)")
