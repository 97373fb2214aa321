"""The typed memory clients (episodic_client) and the `episodic recall` front-end over them.

httpx.MockTransport stands in for the service: these check the requests, the typed answers, the errors,
the retries (503 and connection errors only) and the batching of journal writes. tests/e2e runs the
clients against a real stack.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from pydantic import SecretStr, ValidationError

from episodic.kernel.settings import Settings
from episodic_client import (
    AsyncMemoryClient,
    ClientConfigError,
    EntriesRejected,
    Forbidden,
    Identity,
    InvalidRequest,
    MemoryClient,
    NotFound,
    PayloadTooLarge,
    RequestRefused,
    RetryPolicy,
    ServiceUnavailable,
    ServiceUnreachable,
    Unauthorized,
    UnexpectedAnswer,
    default_url,
)
from episodic_client.calls import journal_batches
from episodic_client.models import MAX_JOURNAL_BYTES, MAX_JOURNAL_ENTRIES, RecallRequest
from schemas.journal import parse_entry
from stack.commands.recall import main as recall_main

HIT = {
    "entry_id": "e1", "score": 0.91, "age_seconds": 120.0, "entry_type": "incident.report", "severity": "error",
    "agent_id": "planner", "crew_id": None, "ts": "2026-11-21T10:00:00Z", "payload": {},
    "summary": "checkout ran out of memory",
}  # fmt: skip
RECALLED = {"mode": "hybrid", "degraded": False, "hits": [HIT]}
FAST = RetryPolicy(retries=3, backoff_s=0.001, max_backoff_s=0.002)
ME = Identity(workspace_id="acme", agent_id="planner", crew_id="platform")

Handler = Callable[[httpx.Request], httpx.Response]


class Service:
    """A scripted service: answers from `script` in order (the last one repeats), records the requests."""

    def __init__(self, *script: tuple[int, Any] | Exception) -> None:
        self.script = list(script)
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        step = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(step, Exception):
            raise step
        status, body = step
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body)

    def client(self, **kw: Any) -> MemoryClient:
        kw.setdefault("identity", ME)
        kw.setdefault("retry", FAST)
        return MemoryClient("http://svc:1/", transport=httpx.MockTransport(self), **kw)

    def aclient(self, **kw: Any) -> AsyncMemoryClient:
        kw.setdefault("identity", ME)
        kw.setdefault("retry", FAST)
        return AsyncMemoryClient("http://svc:1/", transport=httpx.MockTransport(self), **kw)

    def body(self, n: int = -1) -> Any:
        return json.loads(self.seen[n].content)


def test_recall_sends_the_identity_and_the_token_and_returns_the_model() -> None:
    svc = Service((200, RECALLED))
    with svc.client(token=SecretStr("t0k-secret")) as memory:
        answer = memory.recall("checkout oom", k=3, mode="sparse")
        assert answer.hits[0].entry_id == "e1" and answer.hits[0].via == "direct" and not answer.degraded
        memory.recall("canary", scope="crew_shared", agent_id=None)  # explicit fields override the identity
        memory.recall(RecallRequest(workspace_id="other", agent_id="x", query="as given"))
    assert [str(r.url) for r in svc.seen] == ["http://svc:1/v1/recall"] * 3
    assert all(r.headers["authorization"] == "Bearer t0k-secret" for r in svc.seen)
    # in scope own the identity's crew is not sent: there it would narrow the recall to that crew's memories
    assert svc.body(0) == {"workspace_id": "acme", "scope": "own", "agent_id": "planner", "query": "checkout oom",
                           "k": 3, "mode": "sparse", "walk_depth": 0}  # fmt: skip
    assert svc.body(1)["scope"] == "crew_shared" and svc.body(1)["crew_id"] == "platform"
    assert svc.body(1).get("agent_id") is None
    assert svc.body(2)["workspace_id"] == "other"


def test_bad_arguments_fail_before_anything_is_sent() -> None:
    svc = Service((200, RECALLED))
    with svc.client() as memory:
        with pytest.raises(ValidationError, match="k"):
            memory.recall("x", k=99)
        with pytest.raises(ValidationError, match="max_chars or max_tokens"):
            memory.render("x", max_chars=800, max_tokens=300)
    with svc.client(identity=Identity()) as memory, pytest.raises(ClientConfigError, match="workspace_id"):
        memory.recall("x", agent_id="a")
    assert svc.seen == []


def test_render_stats_health_whoami() -> None:
    block = {"text": "<recalled-memory>…</recalled-memory>", "hits": [HIT], "nudge": "note it", "mode": "hybrid",
             "degraded": False}  # fmt: skip
    svc = Service(
        (200, block),
        (200, {"indexed": 3, "dense": 2, "sparse_only": 1}),
        (404, {"error": "no memory-health snapshot"}),
        (200, {"name": "t", "auth": True, "admin": False, "workspaces": ["acme"], "agent_id": "p", "crew_id": None,
               "role": "agent", "scope": "own"}),
    )  # fmt: skip
    with svc.client() as memory:
        rendered = memory.render("deploy", max_chars=800, run_id="r1")
        assert rendered.nudge == "note it" and svc.body(0)["max_chars"] == 800 and svc.body(0)["run_id"] == "r1"
        assert memory.stats().sparse_only == 1
        with pytest.raises(NotFound, match="no memory-health snapshot"):
            memory.health(crew_id="platform")
        assert memory.whoami().role == "agent"
    assert svc.seen[1].url.params["workspace_id"] == "acme"
    assert dict(svc.seen[2].url.params) == {"workspace_id": "acme", "crew_id": "platform"}


@pytest.mark.parametrize(
    ("status", "cls"),
    [(400, InvalidRequest), (401, Unauthorized), (403, Forbidden), (404, NotFound), (413, PayloadTooLarge),
     (422, InvalidRequest), (500, RequestRefused), (502, RequestRefused)],
)  # fmt: skip
def test_a_4xx_or_a_500_is_never_retried_and_carries_the_message(status: int, cls: type[RequestRefused]) -> None:
    svc = Service((status, {"error": "agent_id: token 'p' is bound to agent 'p'"}))
    with svc.client() as memory, pytest.raises(cls) as e:
        memory.recall("x")
    assert type(e.value) is cls and e.value.status_code == status
    assert str(e.value) == f"HTTP {status}: agent_id: token 'p' is bound to agent 'p'"
    assert len(svc.seen) == 1


def test_503_and_connection_errors_are_retried_with_backoff() -> None:
    svc = Service((503, {"error": "store down"}), httpx.ConnectError("refused"), (200, RECALLED))
    with svc.client() as memory:
        assert memory.recall("x").hits
    assert len(svc.seen) == 3
    svc = Service((503, {"error": "store down"}))
    with svc.client() as memory, pytest.raises(ServiceUnavailable, match="store down"):
        memory.recall("x")
    assert len(svc.seen) == FAST.retries + 1
    svc = Service(httpx.ReadTimeout("slow"))
    with svc.client(retry=RetryPolicy(retries=1, backoff_s=0.001)) as memory, pytest.raises(ServiceUnreachable):
        memory.recall("x")
    assert len(svc.seen) == 2


class RetryState:
    """What a tenacity wait reads of a retry: the attempt's outcome (its exception) and its number."""

    def __init__(self, exc: BaseException, attempt: int = 1) -> None:
        self.outcome = type("O", (), {"exception": lambda _self: exc})()
        self.attempt_number = attempt
        self.idle_for = 0.0


def test_retry_after_is_honoured_within_the_cap() -> None:
    policy = RetryPolicy(retries=1, backoff_s=5.0, max_backoff_s=0.05)
    wait = policy.tenacity_kwargs()["wait"]

    assert wait(RetryState(ServiceUnavailable(503, "busy", retry_after=0.01))) == 0.01
    assert wait(RetryState(ServiceUnavailable(503, "busy", retry_after=20))) == 0.05  # capped
    assert 0 < wait(RetryState(ServiceUnreachable("http://svc", "refused"))) <= 0.05  # exponential, capped


def test_the_backoff_doubles_from_backoff_s_with_up_to_backoff_s_of_jitter_and_stops_at_the_cap() -> None:
    """backoff_s * 2**(n-1) + uniform(0, backoff_s), at most max_backoff_s; built without tenacity's
    deprecated `initial`, so no DeprecationWarning (warnings are errors while it is built)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        wait = RetryPolicy(retries=9, backoff_s=0.2, max_backoff_s=1.0).tenacity_kwargs()["wait"]

    refused = ServiceUnreachable("http://svc", "refused")
    for attempt, low, high in ((1, 0.2, 0.4), (2, 0.4, 0.6), (3, 0.8, 1.0), (4, 1.0, 1.0), (8, 1.0, 1.0)):
        waits = [wait(RetryState(refused, attempt)) for _ in range(50)]
        assert all(low <= w <= high for w in waits), (attempt, min(waits), max(waits))
    assert len({wait(RetryState(refused)) for _ in range(20)}) > 1  # jittered


def test_an_answer_that_is_not_the_api_is_an_unexpected_answer() -> None:
    for answer in [(200, [1, 2]), (200, "<html>proxy</html>"), (200, {"hits": "nope"})]:
        with Service(answer).client() as memory, pytest.raises(UnexpectedAnswer):
            memory.recall("x")


def test_remember_writes_one_valid_entry_as_the_identity() -> None:
    svc = Service((202, {"accepted": 1, "ids": ["x"], "rejected": 0, "errors": [], "topic": "journal.entries"}))
    with svc.client() as memory:
        eid = memory.remember("raised the heap", run_id="r1", payload={"gib": 4}, entry_type="summary.generated")
    sent = svc.body()["entries"]
    assert len(sent) == 1 and sent[0]["id"] == eid
    entry = parse_entry(json.dumps(sent[0]).encode())  # the gate's parser accepts it
    assert (entry.workspace_id, entry.agent_id, entry.crew_id, entry.run_id) == ("acme", "planner", "platform", "r1")
    assert svc.seen[0].url.path == "/v1/journal"


def test_remember_raises_the_entry_errors_naming_the_field() -> None:
    refusal = {"error": "no valid entry in the batch: entries[0].severity: must be one of ...",
               "errors": [{"index": 0, "id": "x", "field": "severity", "reason": "bad_severity",
                           "error": "entries[0].severity: must be one of ..."}]}  # fmt: skip
    svc = Service((422, refusal))
    with svc.client() as memory, pytest.raises(EntriesRejected) as e:
        memory.remember("x", severity="fatal")
    assert e.value.errors[0].field == "severity" and len(svc.seen) == 1
    with svc.client(identity=Identity(agent_id="a")) as memory, pytest.raises(ClientConfigError):
        memory.remember("no workspace configured")


def accept_all(request: httpx.Request) -> httpx.Response:
    """The journal endpoint: refuses entries whose summary says "bad", within the service's bounds."""
    assert len(request.content) <= MAX_JOURNAL_BYTES
    entries = json.loads(request.content)["entries"]
    assert len(entries) <= MAX_JOURNAL_ENTRIES
    ok = [e["id"] for e in entries if e["summary"] != "bad"]
    errors = [
        {
            "index": i,
            "id": e["id"],
            "field": "summary",
            "reason": "invalid_field",
            "error": f"entries[{i}].summary: bad",
        }
        for i, e in enumerate(entries)
        if e["summary"] == "bad"
    ]
    if not ok:
        return httpx.Response(422, json={"error": "no valid entry", "errors": errors})
    return httpx.Response(202, json={"accepted": len(ok), "ids": ok, "rejected": len(errors), "errors": errors,
                                     "topic": "journal.entries"})  # fmt: skip


def test_remember_many_splits_to_the_bounds_fills_identity_and_reindexes_errors() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return accept_all(request)

    n = MAX_JOURNAL_ENTRIES + 7
    entries: list[dict[str, Any]] = [
        {"summary": "bad" if i in (3, MAX_JOURNAL_ENTRIES + 2) else f"m{i}"} for i in range(n)
    ]
    with MemoryClient("http://svc", identity=ME, transport=httpx.MockTransport(handler), retry=FAST) as memory:
        answer = memory.remember_many(entries)
    assert len(seen) == 2 and answer.accepted == n - 2 and answer.rejected == 2
    assert [(e.index, e.error) for e in answer.errors] == [
        (3, "entries[3].summary: bad"),
        (MAX_JOURNAL_ENTRIES + 2, f"entries[{MAX_JOURNAL_ENTRIES + 2}].summary: bad"),
    ]
    first = json.loads(seen[0].content)["entries"][0]
    assert first["workspace_id"] == "acme" and first["agent_id"] == "planner" and first["id"] and first["ts"]

    # by bytes: 60 entries of ~40 KB do not fit in one body
    big = [{"id": f"b{i}", "summary": "s", "payload": {"blob": "z" * 40_000}} for i in range(60)]
    batches = list(journal_batches(big))
    assert len(batches) == 3 and [o for o, _ in batches] == [0, 26, 52]
    assert all(len(json.dumps({"entries": b}).encode()) <= MAX_JOURNAL_BYTES for _, b in batches)
    svc = Service((202, {"accepted": 0, "ids": [], "rejected": 0, "errors": [], "topic": "journal.entries"}))
    with svc.client() as memory:
        assert memory.remember_many([]).accepted == 0
    assert svc.seen == []


def test_identify_fills_the_identity_from_the_token() -> None:
    who = {"name": "t", "auth": True, "admin": False, "workspaces": ["acme"], "agent_id": "planner",
           "crew_id": "platform", "role": "lead", "scope": "crew_shared"}  # fmt: skip
    svc = Service((200, who), (200, RECALLED))
    with svc.client(identity=Identity()) as memory:
        me = memory.identify()
        assert me.identity == Identity("acme", "planner", "platform", "lead") and me.identity.scope == "crew_shared"
        me.recall("x")
        me.close()  # a view: does not close the pool it shares
        memory.recall("x", workspace_id="acme", agent_id="p")
    assert svc.body(1)["scope"] == "crew_shared" and svc.body(1)["crew_id"] == "platform"
    several = Identity().fill_from(type("W", (), {**who, "workspaces": ["a", "b"]})())  # type: ignore[arg-type]
    assert several.workspace_id is None


def test_configuration_comes_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("EPISODIC_URL", "EPISODIC_RECALL_URL", "EPISODIC_HTTP_HOST", "EPISODIC_HTTP_PORT"):
        monkeypatch.delenv(var, raising=False)
    assert default_url() == "http://127.0.0.1:8080"
    monkeypatch.setenv("EPISODIC_HTTP_HOST", "0.0.0.0")
    monkeypatch.setenv("EPISODIC_HTTP_PORT", "9")
    assert default_url() == "http://127.0.0.1:9"
    monkeypatch.setenv("EPISODIC_RECALL_URL", "https://old.example/")
    assert default_url() == "https://old.example"
    monkeypatch.setenv("EPISODIC_URL", "https://memory.example/")
    env = {"EPISODIC_TOKEN": "tok-from-env", "EPISODIC_WORKSPACE_ID": "w", "EPISODIC_AGENT_ID": "a",
           "EPISODIC_CREW_ID": "c", "EPISODIC_ROLE": "lead", "EPISODIC_CLIENT_RETRIES": "1"}  # fmt: skip
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with MemoryClient.from_settings() as memory:
        assert memory.url == "https://memory.example" and memory.retry.retries == 1
        assert memory.identity == Identity("w", "a", "c", "lead") and memory._headers["Authorization"].endswith("env")
    with MemoryClient.from_settings(Settings(url="http://other:1"), token=None) as memory:
        assert memory.url == "http://other:1" and memory._headers == {}


CLIENT_ENVS = [
    {"EPISODIC_URL": "https://m.example/", "EPISODIC_TOKEN": "t" * 20, "EPISODIC_WORKSPACE_ID": "w",
     "EPISODIC_AGENT_ID": "a", "EPISODIC_CREW_ID": "c", "EPISODIC_ROLE": "lead", "EPISODIC_CLIENT_TIMEOUT_S": "2.5",
     "EPISODIC_CLIENT_RETRIES": "0"},
    {"episodic_recall_url": "http://old:1", "Episodic_Http_Port": "81", "EPISODIC_HTTP_HOST": "::"},  # any case
    {},
]  # fmt: skip
BAD_CLIENT_ENVS = [{"EPISODIC_ROLE": "boss"}, {"EPISODIC_CLIENT_RETRIES": "21"}, {"EPISODIC_WORKSPACE_ID": ""},
                   {"EPISODIC_HTTP_PORT": "70000"}, {"EPISODIC_CLIENT_TIMEOUT_S": "0"}]  # fmt: skip


@pytest.mark.parametrize("env", CLIENT_ENVS)
def test_the_clients_settings_read_the_environment_as_the_engines_do(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client installed alone reads EPISODIC_* itself (ClientSettings.from_env, pydantic only); the engine's
    Settings (pydantic-settings) extends that class: the same variables give the same values."""
    from episodic_client import ClientSettings

    for var in [v for v in os.environ if v.upper().startswith("EPISODIC_")]:
        monkeypatch.delenv(var)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    alone, engine = ClientSettings.from_env(), Settings()
    assert {f: getattr(engine, f) for f in ClientSettings.model_fields} == alone.model_dump()
    assert alone.service_url == engine.service_url


@pytest.mark.parametrize("env", BAD_CLIENT_ENVS)
def test_a_bad_client_setting_is_refused_by_both(env: dict[str, str]) -> None:
    from episodic_client import ClientSettings

    ((name, value),) = env.items()
    field = name.removeprefix("EPISODIC_").lower()
    with pytest.raises(ValidationError, match=field):
        ClientSettings.from_env(env)
    with pytest.raises(ValidationError, match=field):
        Settings(**{field: value})


async def test_the_async_client_does_the_same() -> None:
    svc = Service(
        (503, {"error": "down"}),
        (200, RECALLED),
        (202, {"accepted": 1, "ids": ["x"], "rejected": 0, "errors": [], "topic": "journal.entries"}),
        (403, {"error": "workspace_id: token 'a' may not read workspace 'acme'"}),
    )
    async with svc.aclient() as memory:
        assert (await memory.recall("x")).hits[0].entry_id == "e1"
        eid = await memory.remember("note")
        with pytest.raises(Forbidden, match="may not read workspace"):
            await memory.stats()
    assert len(svc.seen) == 4 and svc.body(2)["entries"][0]["id"] == eid
    async with Service(httpx.ConnectError("refused")).aclient() as memory:
        with pytest.raises(ServiceUnreachable):
            await memory.recall("x")


ARGS = ["checkout oom", "--workspace", "acme", "--agent", "planner", "--url", "http://svc"]


def test_recall_command_prints_a_table_json_or_the_block(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # the table fits the terminal; this one is wide enough for every column

    def t(*script: tuple[int, Any] | Exception) -> tuple[httpx.MockTransport, Service]:
        svc = Service(*script)
        return httpx.MockTransport(svc), svc

    transport, _ = t((200, {**RECALLED, "degraded": True}))
    assert recall_main(ARGS, transport=transport) == 0
    out = capsys.readouterr()
    assert "score" in out.out and "incident.report" in out.out and "checkout ran out of memory" in out.out
    assert "degraded" in out.err

    transport, _ = t((200, RECALLED))
    assert recall_main([*ARGS, "--json"], transport=transport) == 0
    assert json.loads(capsys.readouterr().out)["hits"][0]["entry_id"] == "e1"

    block = "<recalled-memory>...</recalled-memory>"
    transport, svc = t((200, {"text": block, "hits": [], "mode": "hybrid", "degraded": False}))
    assert recall_main([*ARGS, "--render", "--max-chars", "800"], transport=transport) == 0
    assert capsys.readouterr().out.strip() == block
    assert svc.seen[0].url.path == "/v1/recall/render" and json.loads(svc.seen[0].content)["max_chars"] == 800


def test_recall_command_exit_statuses(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EPISODIC_CLIENT_RETRIES", "0")
    transport = httpx.MockTransport(Service((403, {"error": "token not allowed for workspace acme"})))
    assert recall_main(ARGS, transport=transport) == 1
    assert capsys.readouterr().err.strip() == "episodic recall: HTTP 403: token not allowed for workspace acme"
    assert recall_main(ARGS, transport=httpx.MockTransport(Service(httpx.ConnectError("refused")))) == 3
    err = capsys.readouterr().err
    assert "cannot reach http://svc" in err and "Is `episodic up` running?" in err
    assert recall_main([*ARGS, "--k", "99"], transport=httpx.MockTransport(Service((200, RECALLED)))) == 2
    assert capsys.readouterr().err.startswith("episodic recall: k: Input should be less than or equal to 50")
    with pytest.raises(SystemExit) as usage:
        recall_main(["no workspace"])
    assert usage.value.code == 2


def test_recall_command_sends_the_filters(capsys: pytest.CaptureFixture[str]) -> None:
    svc = Service((200, RECALLED))
    args = [*ARGS, "--since", "2026-11-01T00:00:00Z", "--type", "a", "--type", "b", "--min-severity", "warn",
            "--exclude-run", "r-now", "--json"]  # fmt: skip
    assert recall_main(args, transport=httpx.MockTransport(svc)) == 0
    body = svc.body(0)
    assert body["since"] == "2026-11-01T00:00:00Z" and body["entry_types"] == ["a", "b"]
    assert body["min_severity"] == "warn" and body["exclude_run_id"] == "r-now" and "until" not in body
    bad = [*ARGS, "--since", "2026-11-02T00:00:00Z", "--until", "2026-11-01T00:00:00Z"]
    assert recall_main(bad, transport=httpx.MockTransport(svc)) == 2 and len(svc.seen) == 1
    assert "until: must be after since" in capsys.readouterr().err
    # when the question is asked (issue 46): sent as given, refused before any request when it is no time
    assert recall_main([*ARGS, "--as-of", "2023-06-20T12:00:00+02:00"], transport=httpx.MockTransport(svc)) == 0
    assert svc.body(1)["as_of"] == "2023-06-20T10:00:00Z"
    assert recall_main([*ARGS, "--as-of", "last week"], transport=httpx.MockTransport(svc)) == 2 and len(svc.seen) == 2
    assert "as_of:" in capsys.readouterr().err
