"""Signing in and out of the explorer: the login form (with its CSRF token), the session it opens, and
signing out, which ends the session on the server (recall/ui/session.py says how sessions and CSRF work)."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from episodic.kernel.auth import AuthError
from recall.deps import get_services
from recall.ui.routes import html, session_of, url
from recall.ui.session import CsrfRefused, loopback_request, over_https

log = logging.getLogger(__name__)

router = APIRouter(prefix="/ui", include_in_schema=False)


@router.get("/login")
async def login_form(request: Request, next: str = "/ui", why: str = "") -> Response:
    session = session_of(request)
    if session.open:
        return RedirectResponse("/ui", status_code=303)
    resp = html("login.html", 200, next=_safe_next(next), why=why[:200], open=False, who=None,
                csrf=session.csrf(request))  # fmt: skip
    session.ensure_browser(request, resp)
    return resp


def _safe_next(target: str) -> str:
    """Only a path of this explorer (never another site, never `//host`)."""
    ok = target.startswith("/ui") and not target.startswith("//") and "\\" not in target and len(target) <= 2048
    return target if ok else "/ui"


@router.post("/login")
async def login(request: Request) -> Response:
    session = session_of(request)
    form = await request.form()
    token, target = str(form.get("token", "")), _safe_next(str(form.get("next", "/ui")))

    def again(status: int, why: str) -> Response:
        resp = html("login.html", status, next=target, why=why, open=False, who=None, csrf=session.csrf(request))
        session.ensure_browser(request, resp)
        return resp

    try:
        session.check_csrf(request, str(form.get("csrf") or ""))
    except CsrfRefused as e:
        return again(403, str(e))
    if not over_https(request) and not loopback_request(request):
        # the session cookie is Secure here, so a browser would not send it back over plain http: say so
        return again(
            403,
            "sign in over https (a TLS proxy that sends X-Forwarded-Proto: https, or an SSH "
            "tunnel to this host's loopback): over plain http the session would cross the network in clear",
        )
    try:
        principal, sid = session.login(token)
    except AuthError as e:
        get_services(request).metrics.auth_failures.labels(reason=e.reason).inc()
        return again(401, e.message)
    log.info("explorer: %s signed in", principal.name)
    resp = RedirectResponse(target, status_code=303)
    if sid:
        session.set_session(resp, request, sid)
    return resp


@router.post("/logout")
async def logout(request: Request) -> Response:
    session = session_of(request)
    form = await request.form()
    try:
        session.check_csrf(request, str(form.get("csrf") or ""))
    except CsrfRefused as e:
        return html("error.html", 403, title="Refused", message=str(e), open=session.open, who=None, csrf="")
    session.logout(request)
    resp = RedirectResponse(url("login"), status_code=303)
    session.clear_session(resp, request)
    return resp
