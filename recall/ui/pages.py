"""What each explorer page shows, gathered through the functions the API routes call (blocking: the routes
run these in the thread pool). No second path to the store: recall is `RecallEngine.recall` (plus
`episodic.retrieval.explain` for the why), a memory is `episodic.lifecycle.inspect.memory_detail`, a run is
`memory_page`, health is the `HealthJob`'s stored snapshots, and every check is `episodic.kernel.auth`'s.

A search here does not publish `memory.referenced`: a person looking at memories is not an agent using
them, and counting the look would raise their importance.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from markupsafe import Markup
from pydantic import ValidationError

from episodic.domain.scoring import decay_importance, parse_time
from episodic.kernel.auth import AuthError, Principal, authorize, authorize_recall, listing_narrowed
from episodic.kernel.ports import Selection
from episodic.lifecycle.inspect import Forgotten, memory_page
from episodic.maintenance.decay import DECAY_KEY, JOB_KIND
from episodic.maintenance.health_job import window_days
from episodic.maintenance.nudge import nudge_state
from episodic.retrieval.explain import Explanation, explain, leg_rankings
from episodic_client.models import MemoryDetail, RecallRequest
from recall.deps import Services
from recall.memories import detail_view
from recall.ui import charts
from recall.views import View

HEALTH_DAYS = 14
# The search page's why runs its legs here, beside the recall (bounded: two searches' legs at once)
WHY = ThreadPoolExecutor(max_workers=2, thread_name_prefix="explorer-why")
RUN_PAGES = 5  # a run's timeline: up to RUN_PAGES pages of MAX_PAGE memories (the newest ones)
RUN_PAGE = 100


class BadInput(ValueError):
    """A form value the API would refuse: `field: message`, shown on the page (status 422)."""


def _now(services: Services) -> datetime:
    return services.engine.clock()


# -- the first screen: workspaces -----------------------------------------------------------------------------


@dataclass(slots=True)
class WorkspaceRow:
    workspace_id: str
    memories: int
    score: float | None = None
    band: str | None = None
    computed_at: str | None = None
    chart: Markup = field(default_factory=Markup)
    weakest: str | None = None


def _by_label(services: Services, family: str, label: str, sample: str | None = None) -> dict[str, float]:
    """A metric of this process by one label (e.g. consumer lag by group), read from its registry."""
    out: dict[str, float] = {}
    for fam in services.metrics.registry.collect():
        if fam.name == family:
            for s in fam.samples:
                if sample is None or s.name == sample:
                    out[s.labels.get(label, "?")] = s.value
    return out


def _weakest(metrics: dict[str, Any]) -> str | None:
    scored = [(v, k) for k, v in metrics.items() if isinstance(v, int | float)]
    return f"{min(scored)[1]} {min(scored)[0]:.0f}" if scored else None


def sees_process(services: Services, principal: Principal) -> bool:
    """Whether the home page shows the process's own state (consumer lag, dead letters by reason, the last
    decay, Kafka, the store, the mode): never to a bound token (it is every agent's and workspace's), and
    with `EPISODIC_METRICS_ADMIN_ONLY` to an admin only (those are the figures `/metrics` then keeps for
    admins)."""
    if principal.bound:
        return False
    return principal.admin or not services.settings.metrics_admin_only


def overview(services: Services, principal: Principal) -> dict[str, Any]:
    """Every workspace the caller may read, the unhealthy first, with memories, health band, 14-day chart;
    and, for whom `sees_process`, the process: stack status, consumer lag, the last decay run."""
    if principal.admin:
        counts = dict(services.store.workspaces())
        if services.health is not None:
            for ws in services.health.workspaces():
                counts.setdefault(ws, 0)
    else:
        counts = {ws: services.store.count(ws) for ws in sorted(principal.workspaces)}
    rows = []
    dates = window_days(_now(services), HEALTH_DAYS)
    for ws, n in counts.items():
        row = WorkspaceRow(ws, int(n))
        if services.health is not None:
            history = {s.date: s for s in services.health.history(ws, None, HEALTH_DAYS)}
            latest = services.health.latest(ws, None)
            if latest is not None:
                row.score, row.band = latest.score, latest.band
                row.computed_at = str(latest.to_json_dict().get("computed_at") or "")
                row.weakest = _weakest(latest.to_json_dict().get("metrics") or {})
            days = [charts.Day(d, history[d].score, history[d].band) if d in history else charts.Day(d, None)
                    for d in dates]  # fmt: skip
            row.chart = charts.health_chart(days)
        rows.append(row)
    order = {"red": 0, "yellow": 1, None: 2, "green": 3}
    rows.sort(key=lambda r: (order.get(r.band, 2), r.workspace_id))
    if not sees_process(services, principal):  # the workspaces only: the process's state is not theirs
        return {"rows": rows, "process": False, "dates": (dates[0], dates[-1]) if dates else None}
    decay = services.state.get(JOB_KIND, DECAY_KEY) if services.state is not None else None
    try:
        status = dict(services.status())
    except Exception:  # the status callable is best effort, as on /healthz
        status = {}
    return {
        "process": True,
        "rows": rows,
        "lag": _by_label(services, "episodic_consumer_lag_records", "group"),
        "dead": {
            k: v
            for k, v in _by_label(services, "episodic_dead_lettered", "reason", "episodic_dead_lettered_total").items()
            if v
        },
        "decay": decay,
        "kafka": status.get("kafka", "unknown"),
        "mode": "sparse-only" if services.engine.sparse_only else "vector",
        "store_ok": services.store.ping(),
        "dates": (dates[0], dates[-1]) if dates else None,
    }


# -- search ----------------------------------------------------------------------------------------------------

SEARCH_FIELDS = ("workspace_id", "q", "scope", "agent_id", "crew_id", "mode", "k", "walk_depth", "adjacent",
                 "since", "until", "entry_types", "min_severity", "run_id", "exclude_run_id", "as_of")  # fmt: skip


class WorkspaceSearch(RecallRequest):
    """The explorer's workspace-wide search: every memory of the workspace (folded parts shown as their
    owner, as in the crew's views), for the open service, a workspace token and an admin, never for a bound
    token (`recall_request` refuses it). The engine and the store take the scope `workspace` as they take the
    others (`episodic.store.query.who_filter`); the recall API does not offer it."""

    scope: Literal["workspace"] = "workspace"  # type: ignore[assignment]


def recall_request(form: dict[str, str], principal: Principal) -> RecallRequest:
    """The recall request a search form stands for (empty fields left out; a bound token's agent, crew and
    scope filled in when not given; another principal without an agent or a crew searches the whole
    workspace). BadInput names the field, as the API's 422 would; a bound token's `workspace` scope is 403."""
    f = {k: v.strip() for k, v in form.items() if k in SEARCH_FIELDS and v is not None and v.strip()}
    if principal.bound:
        if f.get("scope") == "workspace":
            raise AuthError("forbidden", f"token {principal.name!r} is bound to an agent: it searches its own scope, "
                            "not the whole workspace", field="scope")  # fmt: skip
        f.setdefault("scope", "crew_shared" if principal.role == "lead" else "own")
        if principal.agent_id is not None and f["scope"] == "own":
            f.setdefault("agent_id", principal.agent_id)
        if principal.crew_id is not None and f["scope"] == "crew_shared":
            f.setdefault("crew_id", principal.crew_id)
    elif "scope" not in f and "agent_id" not in f and "crew_id" not in f:
        f["scope"] = "workspace"
    body: dict[str, Any] = {k: v for k, v in f.items() if k not in ("q", "k", "walk_depth", "adjacent", "entry_types")}
    body["query"] = f.get("q", "")
    for name in ("k", "walk_depth"):
        if name in f:
            try:
                body[name] = int(f[name])
            except ValueError:
                raise BadInput(f"{name}: must be a whole number") from None
    if "adjacent" in f:
        body["adjacent"] = f["adjacent"] in ("1", "true", "on", "yes")
    if "entry_types" in f:
        body["entry_types"] = [t.strip() for t in f["entry_types"].split(",") if t.strip()]
    model = WorkspaceSearch if body.get("scope") == "workspace" else RecallRequest
    if model is WorkspaceSearch:
        body = {k: v for k, v in body.items() if k not in ("agent_id", "crew_id")}
    try:
        return model.model_validate(body)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "query"
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        raise BadInput(f"{'q' if loc == 'query' else loc}: {msg}") from None


@dataclass(slots=True)
class SearchResult:
    request: RecallRequest
    hits: list[Any]
    degraded: bool
    why: Explanation


def search(services: Services, principal: Principal, req: RecallRequest) -> SearchResult:
    authorize_recall(
        principal, workspace_id=req.workspace_id, scope=req.scope, agent_id=req.agent_id, crew_id=req.crew_id
    )
    engine = services.engine
    model = engine.query_for(req)  # the query embedded once, for the recall and its why
    legs = WHY.submit(leg_rankings, engine, req, model)  # beside the recall: the store releases the GIL
    try:
        result = engine.recall(req, model=model)
    finally:
        rankings = legs.result()
    hits = View(services.store, principal, req.workspace_id).hits(result.hits)  # as the API answers (recall.views)
    return SearchResult(req, hits, result.degraded, explain(engine, req, result, model, rankings))


# -- one memory --------------------------------------------------------------------------------------------------


def importance_curve(detail: MemoryDetail, now: datetime) -> tuple[list[tuple[float, float]], float | None]:
    """The memory's importance by days since it was indexed, from the decay formula (SPEC §8) at its current
    reference count: the stored value is recomputed nightly on that curve. (x: days, y: importance); the
    marker: today."""
    base = detail.base_importance
    indexed = parse_time(detail.indexed_at)
    if base is None or indexed is None:
        return [], None
    age = max(0.0, (now - indexed).total_seconds() / 86400)
    horizon = max(200.0, age * 1.2)
    steps = 60
    pts = [
        (d, decay_importance(base, days=d, refs=detail.reference_count, priority=detail.priority))
        for d in (horizon * i / steps for i in range(steps + 1))
    ]
    return pts, age


def memory(services: Services, principal: Principal, workspace_id: str, entry_id: str) -> MemoryDetail | None:
    """The memory as `GET /v1/memory/{id}` answers it (`recall.memories.detail_view`; raises Forgotten,
    AuthError as it does): for a bound token, another agent's memory (or a forgotten one) is None, as a
    missing id (issue 29), and nothing of another agent's that it names is shown (issue 45)."""
    authorize(principal, workspace_id)
    try:
        found = detail_view(services, principal, workspace_id, entry_id)
    except Forgotten:
        if principal.bound:
            return None
        raise
    return None if found is None else MemoryDetail.model_validate(found)


# -- a run ---------------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Timeline:
    workspace_id: str
    run_id: str
    items: list[dict[str, Any]] = field(default_factory=list)  # oldest first
    truncated: bool = False
    nudge: dict[str, Any] | None = None


def run_timeline(services: Services, principal: Principal, workspace_id: str, run_id: str) -> Timeline:
    """The run's memories in order (as `GET /v1/memories?run_id=` lists them, narrowed for a bound token)
    and its nudge counter (read, not delivered)."""
    authorize(principal, workspace_id)
    agent_id, crew_id = listing_narrowed(principal, agent_id=None, crew_id=None)
    selection = Selection(workspace_id, agent_id=agent_id, run_id=run_id, crew_id=crew_id)
    out = Timeline(workspace_id, run_id)
    cursor: str | None = None
    view = View(services.store, principal, workspace_id)
    for _ in range(RUN_PAGES):
        items, cursor = memory_page(services.store, selection, cursor, RUN_PAGE)
        out.items.extend(view.items(items))
        if cursor is None:
            break
    out.truncated = cursor is not None
    out.items.reverse()
    if services.state is not None:
        state = nudge_state(services.state, workspace_id, run_id)
        if state is not None and (not principal.bound or state.get("agent_id") == principal.agent_id):
            out.nudge = state
    return out


def stamp(value: str | None) -> str:
    """A stored timestamp as `YYYY-MM-DD HH:MM:SS` UTC (the text as stored when it does not parse)."""
    t = parse_time(value)
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if t else (value or "-")
