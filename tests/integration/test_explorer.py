"""The memory explorer (recall/ui) over the real store, its state store and the real model, through the app's
own HTTP surface: every page, the why of a search, the relation graph's links, forget with confirmation,
the token cookie, a bound token held to its agent, CSRF, and errors as pages that name the field.
The browser walk against a live stack (Kafka, the DLQ) is tests/e2e/test_explorer_browser.py."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from episodic.kernel.errors import StoreUnavailable
from tests.integration.test_memory_api import TOK_A, TOK_A1, TOK_ADMIN, scratch_env

pytestmark = pytest.mark.integration

OOM = "checkout ran out of memory"


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[dict[str, Any]]:
    with scratch_env(tmp_path_factory.mktemp("explorer"), embedder) as e:
        yield e


@pytest.fixture
def env(tmp_path: Path, embedder: Any) -> Iterator[dict[str, Any]]:
    with scratch_env(tmp_path, embedder) as e:
        yield e


def text(html: str) -> str:
    """The page as a person reads it: tags dropped, entities decoded, spaces folded."""
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html))).strip()


def error_of(html: str) -> str:
    m = re.search(r'class="error"[^>]*>([^<]*)<', html)
    return unescape(m.group(1)) if m else ""


def csrf_of(html: str) -> str:
    m = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert m, "no CSRF field on the page"
    return m.group(1)


def login(c: TestClient, token: str, next: str = "/ui") -> Any:
    """The login form as a browser sends it: read first (its CSRF token and the browser's cookie), then posted."""
    form = c.get("/ui/login")
    return c.post("/ui/login", data={"token": token, "next": next, "csrf": csrf_of(form.text)}, follow_redirects=False)


def signed_in(env: dict[str, Any], token: str) -> TestClient:
    c: TestClient = env["app"](env["tokens"])
    r = login(c, token)
    cookie = r.headers["set-cookie"].lower()
    assert r.status_code == 303 and "httponly" in cookie and "max-age=43200" in cookie, r.text
    assert "samesite=strict" in cookie and "path=/ui" in cookie and token.lower() not in cookie  # an id, not the token
    return c


def test_the_first_screen_lists_workspaces_with_counts_and_the_service_state(shared: dict[str, Any]) -> None:
    r = shared["client"].get("/ui")
    assert r.status_code == 200, r.text
    assert "script-src 'self'" in r.headers["content-security-policy"]
    page = text(r.text)
    assert re.search(r"ws-a \d+", page) and "ws-b 1" in page
    assert "store ok" in page and "kafka ok" in page and "last decay: never" in page
    assert 'href="/ui/search?workspace_id=ws-a"' in r.text


def test_a_search_shows_each_hit_and_why_without_counting_a_reference(shared: dict[str, Any]) -> None:
    published: list[Any] = []
    c = shared["app"]()
    c.app.state.services.publish = lambda t, k, v: published.append((t, v))
    r = c.get("/ui/search", params={"workspace_id": "ws-a", "q": OOM, "agent_id": "a1", "k": "8"})
    assert r.status_code == 200, r.text
    hits = re.findall(r'class="eid">([^<]+)</a>', r.text)
    assert "old-oom" in hits and "theirs" not in hits, hits  # scope own: a1's memories only
    assert hits[0].startswith("now-")
    page = text(r.text)
    # why: every leg of the hybrid with its rank and score, the fusion and the importance multiplier
    for leg in ("dense", "bm25", "bm25-of-dense"):
        assert re.search(rf"{leg} \d+\.\d\d \d+ \d+\.\d{{4}}", page), (leg, page[:2000])
    assert "fusion rrf" in page and "× importance 0.700" in page and "query cosine" in page
    assert "×2 (folded: dup-b)" in page  # the duplicate folded into dup-a
    assert published == []  # a person looking is not an agent recalling
    # the same request through the API ranks the same hits
    api = c.post("/v1/recall", json={"workspace_id": "ws-a", "agent_id": "a1", "query": OOM, "k": 8}).json()
    assert [h["entry_id"] for h in api["hits"]] == hits


def test_search_walk_marks_where_a_hit_came_from(shared: dict[str, Any]) -> None:
    r = shared["client"].get(
        "/ui/search",
        params={
            "workspace_id": "ws-a",
            "q": "DNS for payments",
            "agent_id": "a1",
            "k": "3",
            "walk_depth": "1",
            "mode": "sparse",
        },
    )
    assert r.status_code == 200, r.text
    assert "via supports" in text(r.text) or "via similar" in text(r.text)
    assert "placed: walk" in text(r.text)  # and why it stands there (expand.PLACED)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"workspace_id": "ws-a", "q": OOM, "agent_id": "a1", "k": "abc"}, "k"),
        ({"workspace_id": "ws-a", "q": OOM, "agent_id": "a1", "k": "99"}, "k"),
        ({"workspace_id": "ws-a", "q": OOM, "scope": "own"}, "agent_id"),
        ({"workspace_id": "ws-a", "q": OOM, "agent_id": "a1", "since": "yesterday"}, "since"),
        ({"workspace_id": "ws-a", "q": OOM, "agent_id": "a1", "mode": "magic"}, "mode"),
        ({"workspace_id": "x" * 129, "q": OOM, "agent_id": "a1"}, "workspace_id"),
    ],
)
def test_a_bad_search_is_a_422_page_naming_the_field(
    shared: dict[str, Any], params: dict[str, str], field: str
) -> None:
    r = shared["client"].get("/ui/search", params=params)
    assert r.status_code == 422 and error_of(r.text).startswith(f"{field}:"), error_of(r.text) or r.text


def test_a_memory_page_shows_it_all_and_its_graph_walks_by_links(shared: dict[str, Any]) -> None:
    c = shared["client"]
    r = c.get("/ui/memory/old-oom", params={"workspace_id": "ws-a"})
    assert r.status_code == 200, r.text
    page = text(r.text)
    assert "the checkout service was OOM killed last quarter" in page and "importance 0.700 (base 0.70)" in page
    assert '"n": "old-oom"' in page and "run r-old" in page.lower()
    svg = re.search(r"<svg[^>]*aria-label=\"relations of old-oom[^\"]*\".*?</svg>", r.text, re.S)
    assert svg, "no relation graph"
    links = re.findall(r'<a href="([^"]+)" class="node"', svg.group(0))
    assert sorted(unescape(x) for x in links) == ["/ui/memory/old-db?workspace_id=ws-a",
                                                  "/ui/memory/old-dns?workspace_id=ws-a"]  # fmt: skip
    walked = c.get(unescape(links[0]))  # a click on a neighbour: its own page, with the way back
    assert walked.status_code == 200 and 'aria-label="memory old-oom"' in walked.text
    assert "<polyline" in r.text  # importance over time
    alias = c.get("/ui/memory/dup-b", params={"workspace_id": "ws-a"})
    assert "exact duplicate folded into this memory" in text(alias.text) and ">dup-a</h1>" in alias.text
    assert c.get("/ui/memory/a%2Fb%3Ac", params={"workspace_id": "ws-a"}).status_code == 200


def test_a_run_timeline_is_oldest_first(shared: dict[str, Any]) -> None:
    r = shared["client"].get("/ui/run/r-now", params={"workspace_id": "ws-a"})
    assert r.status_code == 200, r.text
    ids = re.findall(r'class="eid">([^<]+)</a>', r.text)
    mine = [i for i in ids if i.startswith("now-")]
    assert mine == ["now-3", "now-2", "now-1", "now-0"] and "theirs" in ids  # now-3 is the oldest


def test_missing_things_are_404_pages_that_say_which(shared: dict[str, Any]) -> None:
    c = shared["client"]
    r = c.get("/ui/memory/nope", params={"workspace_id": "ws-a"})
    assert r.status_code == 404 and error_of(r.text).startswith("entry_id:")
    r = c.get("/ui/memory/old-oom")
    assert r.status_code == 422 and error_of(r.text).startswith("workspace_id:")
    r = c.get("/ui/forget/nope", params={"workspace_id": "ws-a"})
    assert r.status_code == 404 and error_of(r.text).startswith("forget_id:")


def test_a_store_failure_is_a_503_page_with_a_reference(shared: dict[str, Any], monkeypatch: Any) -> None:
    c = shared["app"]()
    store = c.app.state.services.store

    def down(*a: Any, **k: Any) -> Any:
        raise StoreUnavailable("connection refused to 10.0.0.7")

    monkeypatch.setattr(store, "workspaces", down)
    r = c.get("/ui")
    assert r.status_code == 503 and "ref " in error_of(r.text) and "10.0.0.7" not in r.text


def test_forget_asks_first_then_forgets_and_shows_its_status(env: dict[str, Any]) -> None:
    c = env["client"]
    form = c.get("/ui/forget", params={"workspace_id": "ws-a", "entry_ids": "old-dns"})
    csrf = csrf_of(form.text)
    ask = c.post("/ui/forget", data={"csrf": csrf, "workspace_id": "ws-a", "entry_ids": "old-dns"})
    assert ask.status_code == 200 and "Yes, forget" in ask.text and "checkout DNS for payments failed" in ask.text
    assert c.get("/ui/memory/old-dns", params={"workspace_id": "ws-a"}).status_code == 200  # not yet
    done = c.post("/ui/forget", data={"csrf": csrf, "workspace_id": "ws-a", "entry_ids": "old-dns", "confirm": "yes"},
                  follow_redirects=False)  # fmt: skip
    assert done.status_code == 303 and done.headers["location"].startswith("/ui/forget/")
    status = c.get(done.headers["location"])
    assert "applied" in text(status.text) and "Removed 1 memory" in text(status.text)
    gone = c.get("/ui/memory/old-dns", params={"workspace_id": "ws-a"})
    assert gone.status_code == 404 and "was forgotten" in error_of(gone.text)


@pytest.mark.parametrize("headers", [{}, {"sec-fetch-site": "cross-site"}])
def test_a_forget_without_this_sessions_csrf_token_changes_nothing(
    env: dict[str, Any], headers: dict[str, str]
) -> None:
    c = env["client"]
    csrf = csrf_of(c.get("/ui/forget").text) if headers else "0" * 64
    r = c.post("/ui/forget", data={"csrf": csrf, "workspace_id": "ws-a", "entry_ids": "old-db", "confirm": "yes"},
               headers=headers, follow_redirects=False)  # fmt: skip
    assert r.status_code == 403 and error_of(r.text).startswith("refused")
    assert env["sink"].sent == [] and c.get("/ui/memory/old-db", params={"workspace_id": "ws-a"}).status_code == 200


def test_with_tokens_a_browser_signs_in_and_the_cookie_is_checked_like_the_header(env: dict[str, Any]) -> None:
    c = env["app"](env["tokens"])
    r = c.get("/ui/search?workspace_id=ws-a", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/login?next=%2Fui%2Fsearch")
    bad = login(c, "not-a-token-of-this-service")
    assert (
        bad.status_code == 401
        and "invalid bearer token" in text(bad.text)
        and "episodic_ui_session" not in str(bad.headers.get("set-cookie"))
    )
    forged = c.post("/ui/login", data={"token": TOK_ADMIN, "next": "/ui"}, follow_redirects=False)
    assert forged.status_code == 403 and "refused" in text(forged.text)  # login CSRF: no token of this browser
    evil = login(c, TOK_ADMIN, next="//evil.example/")
    assert evil.headers["location"] == "/ui"  # never sent off-site after signing in
    a = signed_in(env, TOK_A)
    page = text(a.get("/ui").text)
    assert "ws-a" in page and "ws-b" not in page  # a workspace token sees its workspaces only
    assert a.get("/ui/memory/old-oom", params={"workspace_id": "ws-b"}).status_code == 403
    raw = env["app"](env["tokens"]).get("/ui", headers={"Cookie": f"episodic_ui_session={TOK_A}"},
                                        follow_redirects=False)  # fmt: skip
    assert raw.status_code == 303 and "session+has+ended" in raw.headers["location"]  # a token is no session
    session = a.cookies["episodic_ui_session"]
    refused = a.post("/ui/logout", follow_redirects=False)
    assert refused.status_code == 403 and a.get("/ui").status_code == 200  # sign-out wants its CSRF token too
    out = a.post("/ui/logout", data={"csrf": csrf_of(a.get("/ui").text)}, follow_redirects=False)
    assert out.status_code == 303 and "episodic_ui_session=" in out.headers["set-cookie"]
    again = env["app"](env["tokens"]).get("/ui", headers={"Cookie": f"episodic_ui_session={session}"},
                                          follow_redirects=False)  # fmt: skip
    assert again.status_code == 303 and "session+has+ended" in again.headers["location"]  # revoked on the server
    header = env["app"](env["tokens"]).get("/ui", headers={"Authorization": f"Bearer {TOK_A}"})
    assert header.status_code == 200  # scripts may send the header instead


def test_a_bound_token_sees_only_its_agents_memories(env: dict[str, Any]) -> None:
    c = signed_in(env, TOK_A1)  # bound to agent a1
    r = c.get("/ui/memory/theirs", params={"workspace_id": "ws-a"})  # agent a2's: as a missing id (issue 29)
    r0 = c.get("/ui/memory/no-such-id", params={"workspace_id": "ws-a"})
    assert r.status_code == r0.status_code == 404
    assert error_of(r.text).replace("theirs", "X") == error_of(r0.text).replace("no-such-id", "X")
    r = c.get("/ui/search", params={"workspace_id": "ws-a", "q": OOM, "agent_id": "a2"})
    assert r.status_code == 403 and error_of(r.text).startswith("agent_id:")
    r = c.get("/ui/search", params={"workspace_id": "ws-a", "q": OOM, "k": "10"})  # its own agent filled in
    assert r.status_code == 200 and "old-oom" in r.text and "theirs" not in r.text
    run = c.get("/ui/run/r-now", params={"workspace_id": "ws-a"})
    assert "now-0" in run.text and "theirs" not in run.text
    csrf = csrf_of(c.get("/ui/forget").text)
    r = c.post("/ui/forget", data={"csrf": csrf, "workspace_id": "ws-a", "entry_ids": "theirs"})
    r0 = c.post("/ui/forget", data={"csrf": csrf, "workspace_id": "ws-a", "entry_ids": "no-such-id"})
    assert r.status_code == r0.status_code == 200  # both previewed as ids of no memory: nothing of a2's shown
    assert "Ids of no memory" in r.text and r.text.replace("theirs", "X") == r0.text.replace("no-such-id", "X")
    assert c.get("/ui/dlq").status_code == 403  # dead letters are not narrowed to an agent


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"workspace_id": "ws-a"}, "all"),  # no selection at all
        ({"workspace_id": "", "entry_ids": "old-db"}, "workspace_id"),
        ({"workspace_id": "ws-a", "entry_ids": "x" * 129}, "entry_ids.0"),
        ({"workspace_id": "ws-a", "entry_ids": "old-db", "run_id": "r-old"}, "run_id"),
    ],
)
def test_a_bad_forget_form_is_a_422_page_naming_the_field(
    env: dict[str, Any], form: dict[str, str], field: str
) -> None:
    c = env["client"]
    csrf = csrf_of(c.get("/ui/forget").text)
    r = c.post("/ui/forget", data={"csrf": csrf, "confirm": "yes", **form})
    assert r.status_code == 422 and error_of(r.text).startswith(f"{field}:"), error_of(r.text) or r.text
    assert env["sink"].sent == []


def test_dead_letter_garbage_is_refused_before_kafka_and_kafka_down_is_a_503_page(shared: dict[str, Any]) -> None:
    c = shared["client"]  # its status names a bootstrap nothing listens on
    r = c.get("/ui/dlq/not-an-id")
    assert r.status_code == 422 and error_of(r.text).startswith("ids:")
    csrf = csrf_of(c.get("/ui/forget").text)
    r = c.post("/ui/dlq/replay", data={"csrf": csrf})
    assert r.status_code == 422 and error_of(r.text).startswith("id:")
    r = c.post("/ui/dlq/replay", data={"csrf": "f" * 64, "id": "0:1", "confirm": "yes"})
    assert r.status_code == 403 and error_of(r.text).startswith("refused")
    r = c.get("/ui/dlq")
    assert r.status_code == 503 and "Kafka cannot be reached" in error_of(r.text) and "127.0.0.1:1" not in r.text


def test_a_memory_page_shows_how_agents_said_it_served(env: dict[str, Any]) -> None:
    """Reviews from use (issue 26): the review state as the importance agent stored it."""
    from datetime import UTC, datetime

    from episodic.maintenance.reviews import ReviewApplier
    from schemas.events import ReviewedEvent, ReviewItem

    c = env["client"]
    before = text(c.get("/ui/memory/old-db", params={"workspace_id": "ws-a"}).text)
    assert "reviews none yet" in before
    applier = ReviewApplier(store=env["store"], state=env["state"])
    for i, rating in enumerate(("good", "again", "good")):
        ev = ReviewedEvent(
            event_id=f"ev-{i}", workspace_id="ws-a", agent_id="a1", at=datetime.now(UTC),
            reviews=[ReviewItem(entry_id="old-db", rating=rating)],  # type: ignore[arg-type]
        )  # fmt: skip
        applier.apply([(ev.event_id, ev)])
    page = text(c.get("/ui/memory/old-db", params={"workspace_id": "ws-a"}).text)
    assert "reviews 3 (again 1 · hard 0 · good 2 · easy 0), last good" in page
    assert re.search(r"FSRS stability [\d.]+ days, difficulty [\d.]+, retrievability now 1\.00", page), page
