"""The explorer's routes: every page under /ui, server-rendered HTML (Jinja2, autoescaped) with htmx for the
few live parts. Pages are GETs with their whole state in the URL (shareable); what changes something
(replay, forget) is a POST with a CSRF token that first answers a confirmation page and acts only on the
second, confirmed POST; signing in and out are POSTs with a CSRF token too (recall/ui/session.py).

Errors are pages, not JSON: no session, the login form (303); a token that may not see it, 403 with the
API's message (which names the field); a bad form value or an id longer than the API takes, 422 naming it; a
store failure, 503 with a reference to the log. Blocking work (the store, the model, rendering the page)
runs in the thread pool; the dead letters' Kafka reads in an executor of their own (recall/ui/dead_letters.py).

**Another site cannot fire a page.** A GET that a browser says comes from another site (`Sec-Fetch-Site:
cross-site`, or `same-site`: another port of localhost is the same site) does no work: it answers a small page
with a link to open it here (a click on it is same-origin). On the open service no cookie stands between a
web page and 127.0.0.1, so without this any page could make a browser run searches and dead-letter reads.
Browsers too old to send `Sec-Fetch-Site`, and other clients, are served as before.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.concurrency import run_in_threadpool

from episodic.kernel.auth import AuthError, Principal
from episodic.kernel.errors import BrokerUnavailable, EpisodicError
from episodic.lifecycle.dlq import Selector, parse_letter_id, parse_since
from episodic.lifecycle.inspect import Forgotten
from episodic_client.models import MAX_ID_LEN
from recall.deps import Services, get_services
from recall.ui import charts, dead_letters, forgets, pages
from recall.ui.session import CsrfRefused, LoginNeeded, Session

log = logging.getLogger(__name__)
STATIC = Path(__file__).parent / "static"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

env = Environment(loader=PackageLoader("recall.ui", "templates"), autoescape=select_autoescape(default=True))


def url(path: str, **params: Any) -> str:
    """`/ui/<path>` with its parameters (empty ones left out); path segments given as-is."""
    query = urlencode({k: v for k, v in params.items() if v not in (None, "")}, doseq=True)
    return f"/ui/{path}" + (f"?{query}" if query else "")


def memory_url(workspace_id: str, entry_id: str) -> str:
    return url(f"memory/{quote(entry_id, safe='')}", workspace_id=workspace_id)


def run_url(workspace_id: str, run_id: str) -> str:
    return url(f"run/{quote(run_id, safe='')}", workspace_id=workspace_id)


# the title of a hit's "placed" tag on the recall page (episodic.retrieval.expand: why a hit stands where it does)
PLACED_WHY = {
    "walk": "brought in one hop along an edge of a direct hit (walk_depth 1), scored from it",
    "adjacent": "brought in as a run neighbour of a direct hit, scored below it",
    "newer": "put right above the older memory it supersedes (a changed number or date on the same subject)",
}
env.globals.update(url=url, memory_url=memory_url, run_url=run_url, stamp=pages.stamp, placed_why=PLACED_WHY)

router = APIRouter(prefix="/ui", include_in_schema=False)


def session_of(request: Request) -> Session:
    found: Session = request.app.state.ui_session
    return found


def html(template: str, status: int = 200, **ctx: Any) -> HTMLResponse:
    """A small page rendered here (errors, forms); the pages that show data use `rendered`."""
    body = env.get_template(template).render(**ctx)
    return HTMLResponse(body, status_code=status, headers=security_headers())


async def rendered(template: str, status: int = 200, **ctx: Any) -> HTMLResponse:
    """A page rendered in the thread pool (a listing of hundreds of rows, a letter's bytes: CPU work that
    must not hold the event loop the gate and the consumer share in `episodic up`)."""
    body = await run_in_threadpool(env.get_template(template).render, **ctx)
    return HTMLResponse(body, status_code=status, headers=security_headers())


def bounded(name: str, value: str, limit: int = MAX_ID_LEN) -> str:
    """`value` of the form or path, when it is no longer than the API takes (else BadInput naming it)."""
    if len(value) > limit:
        raise pages.BadInput(f"{name}: at most {limit} characters")
    return value


def from_elsewhere(request: Request) -> bool:
    """A GET the browser says another site (or another port of this host) made: answered without work."""
    return request.method == "GET" and request.headers.get("sec-fetch-site") in ("cross-site", "same-site")


def security_headers() -> dict[str, str]:
    return {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin",
            "Cache-Control": "no-store"}  # fmt: skip


Build = Callable[[Principal, Services, dict[str, Any]], Awaitable[Response]]


async def page(request: Request, build: Build) -> Response:
    """Run `build` for the caller, turning the refusals and failures into pages."""
    session = session_of(request)
    response = await _page(request, build, session)
    session.ensure_browser(request, response)
    return response


async def _page(request: Request, build: Build, session: Session) -> Response:
    services = get_services(request)
    ctx: dict[str, Any] = {"request": request, "open": session.open, "csrf": session.csrf(request)}
    if from_elsewhere(request):
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return html("elsewhere.html", 403, target=here, **ctx)
    try:
        principal = session.principal(request)
        ctx["who"] = principal
        return await build(principal, services, ctx)
    except dead_letters.Busy as e:
        return html("error.html", 503, title="Busy", message=str(e), **ctx)
    except LoginNeeded as e:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(url("login", next=target, why=e.reason), status_code=303)
    except AuthError as e:
        services.metrics.auth_failures.labels(reason=e.reason).inc()
        return html("error.html", e.status, title="Not allowed" if e.status == 403 else "Sign in", message=e.message,
                    **ctx)  # fmt: skip
    except (pages.BadInput, ValueError) as e:
        return html("error.html", 422, title="Check the form", message=str(e), **ctx)
    except CsrfRefused as e:
        return html("error.html", 403, title="Refused", message=str(e), **ctx)
    except Forgotten as e:
        return html("error.html", 404, title="Forgotten", message=f"entry_id: {e}", **ctx)
    except BrokerUnavailable as e:
        ref = uuid.uuid4().hex[:12]
        log.warning("explorer: broker unavailable %s on %s: %s", ref, request.url.path, e)
        return html("error.html", 503, title="Kafka unavailable", message=f"Kafka cannot be reached (ref {ref}: "
                    "see the service log)", **ctx)  # fmt: skip
    except EpisodicError as e:
        ref = uuid.uuid4().hex[:12]
        log.warning("explorer: store failure %s on %s: %s: %s", ref, request.url.path, type(e).__name__, e)
        return html("error.html", 503, title="Store unavailable",
                    message=f"memory store unavailable (ref {ref}: see the service log)", **ctx)  # fmt: skip


# -- pages --------------------------------------------------------------------------------------------------------


@router.get("")
async def home(request: Request) -> Response:
    async def build(principal: Principal, services: Services, ctx: dict[str, Any]) -> Response:
        view = await run_in_threadpool(pages.overview, services, principal)
        return await rendered("home.html", **ctx, **view)

    return await page(request, build)


@router.get("/search")
async def search(request: Request) -> Response:
    form = dict(request.query_params)

    async def build(principal: Principal, services: Services, ctx: dict[str, Any]) -> Response:
        ctx.update(form=form, error=None)
        for name in ("agent_id", "crew_id", "run_id", "exclude_run_id"):
            bounded(name, form.get(name) or "")
        if not form.get("workspace_id") or not form.get("q"):
            ctx["error"] = None if not form else "workspace_id and q: give both to search"
            return html("search.html", 200 if not form else 422, result=None, **ctx)
        try:
            req = pages.recall_request(form, principal)
        except pages.BadInput as e:
            ctx["error"] = str(e)
            return html("search.html", 422, result=None, **ctx)

        def render() -> str:
            found = pages.search(services, principal, req)
            return env.get_template("search.html").render(**ctx, result=found)

        return HTMLResponse(await run_in_threadpool(render), headers=security_headers())

    return await page(request, build)


@router.get("/memory/{entry_id:path}")
async def memory(request: Request, entry_id: str, workspace_id: str = "") -> Response:
    async def build(principal: Principal, services: Services, ctx: dict[str, Any]) -> Response:
        if not workspace_id:
            raise pages.BadInput("workspace_id: required (the memory's workspace)")
        bounded("workspace_id", workspace_id)
        bounded("entry_id", entry_id)

        def render() -> tuple[int, str]:
            found = pages.memory(services, principal, workspace_id, entry_id)
            if found is None:
                return 404, env.get_template("error.html").render(
                    **ctx, title="No such memory", message=f"entry_id: no memory {entry_id!r} in {workspace_id!r}"
                )
            points, now_x = pages.importance_curve(found, pages._now(services))
            chart = charts.line_chart(points, marker=now_x, label="importance by days since indexed")
            graph = charts.relation_graph(found.entry_id, [r.model_dump() for r in found.relations],
                                          lambda other: memory_url(workspace_id, other))  # fmt: skip
            return 200, env.get_template("memory.html").render(
                **ctx, m=found, chart=chart, graph=graph, review_ranking=services.settings.review_ranking
            )

        status, body = await run_in_threadpool(render)
        return HTMLResponse(body, status_code=status, headers=security_headers())

    return await page(request, build)


@router.get("/run/{run_id:path}")
async def run(request: Request, run_id: str, workspace_id: str = "") -> Response:
    async def build(principal: Principal, services: Services, ctx: dict[str, Any]) -> Response:
        if not workspace_id:
            raise pages.BadInput("workspace_id: required (the run's workspace)")
        bounded("workspace_id", workspace_id)
        bounded("run_id", run_id)
        timeline = await run_in_threadpool(pages.run_timeline, services, principal, workspace_id, run_id)
        return await rendered("run.html", **ctx, t=timeline)

    return await page(request, build)


# -- dead letters -----------------------------------------------------------------------------------------------


@router.get("/dlq")
async def dlq(
    request: Request, reason: str = "", workspace_id: str = "", since: str = "", entry_id: str = ""
) -> Response:
    async def build(principal: Principal, services: Services, ctx: dict[str, Any]) -> Response:
        for name, value in (("reason", reason), ("workspace_id", workspace_id), ("entry_id", entry_id)):
            bounded(name, value)
        bounded("since", since, 64)
        selector = Selector(
            reasons=frozenset({reason}) if reason else frozenset(),
            since=parse_since(since) if since else None,
            workspace_id=workspace_id or None,
            entry_ids=frozenset({entry_id}) if entry_id else frozenset(),
        )
        found = await dead_letters.listing(services, principal, selector)
        filters = {"reason": reason, "workspace_id": workspace_id, "since": since, "entry_id": entry_id}
        return await rendered("dlq.html", **ctx, listing=found, filters=filters)

    return await page(request, build)


@router.get("/dlq/{letter_id}")
async def dlq_letter(request: Request, letter_id: str) -> Response:
    async def build(principal: Principal, services: Services, ctx: dict[str, Any]) -> Response:
        partition, offset = parse_letter_id(bounded("id", letter_id, 48))
        letter = await dead_letters.one(services, principal, partition, offset)
        if letter is None:
            return html("error.html", 404, title="No such dead letter", message=f"id: no dead letter {letter_id}",
                        **ctx)  # fmt: skip
        kind, shown = await run_in_threadpool(dead_letters.shown_bytes, letter)
        fragment = request.headers.get("hx-request") == "true"
        return await rendered("dlq_bytes.html" if fragment else "dlq_letter.html", **ctx, letter=letter,
                              v=letter.view(), kind=kind, shown=shown)  # fmt: skip

    return await page(request, build)


@router.post("/dlq/replay")
async def dlq_replay(request: Request) -> Response:
    form = await request.form()

    async def build(principal: Principal, services: Services, ctx: dict[str, Any]) -> Response:
        session_of(request).check_csrf(request, str(form.get("csrf") or ""))
        raw = [str(v) for v in form.getlist("id")]
        if not raw:
            raise pages.BadInput("id: choose at least one dead letter to replay")
        if len(raw) > dead_letters.MAX_SHOWN:
            raise pages.BadInput(f"id: at most {dead_letters.MAX_SHOWN} dead letters in one replay")
        ids = frozenset(parse_letter_id(bounded("id", i, 48)) for i in raw)
        force = form.get("force") == "1"
        dead_letters.require_reader(principal)
        if force:
            dead_letters.require_force(principal)
        if form.get("confirm") != "yes":
            found = await dead_letters.listing(services, principal, Selector(ids=ids))
            return await rendered("dlq_confirm.html", **ctx, letters=found.letters, force=force)
        report = await dead_letters.replay_ids(services, principal, ids, force=force)
        return await rendered("dlq_done.html", **ctx, report=report)

    return await page(request, build)


# -- forget -----------------------------------------------------------------------------------------------------


@router.get("/forget")
async def forget_form(request: Request) -> Response:
    form = dict(request.query_params)

    async def build(principal: Principal, services: Services, ctx: dict[str, Any]) -> Response:
        return html("forget.html", **ctx, form=form, error=None)

    return await page(request, build)


@router.post("/forget")
async def forget(request: Request) -> Response:
    form = {k: str(v) for k, v in (await request.form()).items()}

    async def build(principal: Principal, services: Services, ctx: dict[str, Any]) -> Response:
        session_of(request).check_csrf(request, form.get("csrf"))
        ask = forgets.Ask.from_form(form)
        if form.get("confirm") != "yes":
            preview = await run_in_threadpool(forgets.preview, services, principal, ask)
            return await rendered("forget_confirm.html", **ctx, ask=ask, preview=preview)
        status, doc = await forgets.submit(services, principal, ask)
        if doc is None or "forget_id" not in doc:
            message = (doc or {}).get("error", "the forget was not accepted")
            return html("error.html", status, title="Forget failed", message=message, **ctx)
        target = url(f"forget/{quote(str(doc['forget_id']), safe='')}", workspace_id=ask.workspace_id)
        return RedirectResponse(target, status_code=303)

    return await page(request, build)


@router.get("/forget/{forget_id}")
async def forget_status(request: Request, forget_id: str, workspace_id: str = "") -> Response:
    async def build(principal: Principal, services: Services, ctx: dict[str, Any]) -> Response:
        if not workspace_id:
            raise pages.BadInput("workspace_id: required (the forget's workspace)")
        bounded("workspace_id", workspace_id)
        bounded("forget_id", forget_id)
        doc = await run_in_threadpool(forgets.status, services, principal, workspace_id, forget_id)
        if doc is None:
            return html("error.html", 404, title="No such forget",
                        message=f"forget_id: no forget {forget_id!r} in workspace {workspace_id!r}", **ctx)  # fmt: skip
        fragment = request.headers.get("hx-request") == "true"
        return await rendered("forget_status.html" if fragment else "forget_done.html", **ctx, doc=doc)

    return await page(request, build)
