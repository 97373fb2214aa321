"""The explorer holds up like the API (issue 45, part 6), over the real store and model through the app's own
HTTP surface: no other site fires a page, bad input is a 4xx naming the field, pages render off the event loop,
the home page keeps the process's state to whom may see it, the forget form never splits an id, `force` is an
admin's, and a workspace-wide search is there for unbound principals only. Sessions and sign-in/out are
tests/integration/test_explorer.py and tests/unit/test_ui_session.py; the dead letters against the real
broker tests/integration/test_dlq_index.py."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from recall.ui import routes
from recall.ui.forgets import Ask
from tests.integration.test_explorer import OOM, csrf_of, error_of, signed_in, text
from tests.integration.test_memory_api import TOK_A, TOK_A1, TOK_ADMIN, scratch_env

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[dict[str, Any]]:
    with scratch_env(tmp_path_factory.mktemp("explorer-trust"), embedder) as e:
        yield e


@pytest.fixture
def env(tmp_path: Path, embedder: Any) -> Iterator[dict[str, Any]]:
    with scratch_env(tmp_path, embedder) as e:
        yield e


@pytest.mark.parametrize("site", ["cross-site", "same-site"])
@pytest.mark.parametrize(
    "path", ["/ui/search?workspace_id=ws-a&q=checkout&agent_id=a1", "/ui/dlq", "/ui/memory/old-oom?workspace_id=ws-a"]
)
def test_another_site_cannot_fire_a_page(shared: dict[str, Any], path: str, site: str) -> None:
    """A GET another site (or another port of this host: same-site) makes does no work on the open loopback
    service: a small page with a link to open it here; opened from here (same-origin, or typed: none), it
    runs."""
    c: TestClient = shared["app"]()
    ran: list[str] = []
    real = c.app.state.services.engine.recall
    c.app.state.services.engine.recall = lambda *a, **k: ran.append("recall") or real(*a, **k)
    r = c.get(path, headers={"sec-fetch-site": site})
    assert r.status_code == 403 and "Opened from another site" in r.text and ran == []
    assert f'href="{path.replace("&", "&amp;")}"' in r.text  # the way to open it here
    if path.startswith("/ui/memory"):
        assert c.get(path, headers={"sec-fetch-site": "same-origin"}).status_code == 200
        assert c.get(path, headers={"sec-fetch-site": "none"}).status_code == 200


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/ui/dlq?since=99999999999d", "since"),  # OverflowError in parse_since: was a 500
        ("/ui/dlq?since=" + "9" * 80 + "d", "since"),
        ("/ui/memory/" + "x" * 129 + "?workspace_id=ws-a", "entry_id"),
        ("/ui/memory/old-oom?workspace_id=" + "w" * 129, "workspace_id"),
        ("/ui/run/" + "r" * 129 + "?workspace_id=ws-a", "run_id"),
        ("/ui/forget/" + "f" * 129 + "?workspace_id=ws-a", "forget_id"),
        ("/ui/dlq/" + "1" * 60, "id"),
        ("/ui/dlq?workspace_id=" + "w" * 129, "workspace_id"),
        ("/ui/search?workspace_id=ws-a&q=x&run_id=" + "r" * 129, "run_id"),
    ],
)
def test_bad_input_is_a_4xx_page_naming_the_field(shared: dict[str, Any], path: str, field: str) -> None:
    r = shared["client"].get(path)
    assert r.status_code == 422 and error_of(r.text).startswith(f"{field}:"), (r.status_code, error_of(r.text))


def test_a_csrf_token_beyond_ascii_is_refused_not_a_500(shared: dict[str, Any]) -> None:
    c = shared["client"]
    for path in ("/ui/forget", "/ui/dlq/replay"):
        r = c.post(path, data={"csrf": "é" * 64, "workspace_id": "ws-a", "entry_ids": "old-db", "id": "0:1"})
        assert r.status_code == 403 and error_of(r.text).startswith("refused"), (path, r.status_code)
    signed = signed_in(shared, TOK_A)
    assert signed.post("/ui/logout", data={"csrf": "ü"}, follow_redirects=False).status_code == 403


@pytest.mark.parametrize(
    ("path", "method", "template"),
    [
        ("/ui", "get", "home.html"),
        ("/ui/run/r-old?workspace_id=ws-a", "get", "run.html"),
        ("/ui/forget", "post", "forget_confirm.html"),
    ],
)
def test_pages_render_off_the_event_loop(
    shared: dict[str, Any], monkeypatch: pytest.MonkeyPatch, path: str, method: str, template: str
) -> None:
    """Rendering a page of hundreds of rows is CPU work: it runs in the thread pool, not on the loop that
    carries the gate and the consumer in `episodic up`."""
    where: list[str] = []
    real = routes.env.get_template

    def spy(name: str, *a: Any, **k: Any) -> Any:
        tpl = real(name, *a, **k)
        if name == template:
            render = tpl.render
            tpl.render = lambda *ra, **rk: where.append(threading.current_thread().name) or render(*ra, **rk)  # type: ignore[method-assign]
        return tpl

    monkeypatch.setattr(routes.env, "get_template", spy)
    c = shared["client"]
    if method == "get":
        r = c.get(path)
    else:
        r = c.post(
            path, data={"csrf": csrf_of(c.get("/ui/forget").text), "workspace_id": "ws-a", "entry_ids": "old-db"}
        )
    assert r.status_code == 200, r.text[:300]
    assert where and all(w.startswith("AnyIO worker thread") for w in where), where


def test_the_home_page_keeps_the_process_state_to_whom_may_see_it(env: dict[str, Any]) -> None:
    """Consumer lag, dead letters by reason, the last decay and the stack's state are the process's, not a
    workspace's: a bound token never sees them, and with EPISODIC_METRICS_ADMIN_ONLY only an admin does."""
    bound = text(signed_in(env, TOK_A1).get("/ui").text)
    assert "ws-a" in bound and "lag:" not in bound and "dead letters:" not in bound and "last decay" not in bound
    assert "lag:" in text(signed_in(env, TOK_A).get("/ui").text)  # a workspace token, metrics open to it
    from episodic.kernel.settings import Settings

    def client(token: str) -> TestClient:
        c = env["app"](env["tokens"])
        services = c.app.state.services
        services.settings = Settings(tokens_file=env["tokens"], metrics_admin_only=True)
        c.headers["authorization"] = f"Bearer {token}"
        return c

    assert "lag:" not in text(client(TOK_A).get("/ui").text) and "ws-a" in text(client(TOK_A).get("/ui").text)
    assert "lag:" in text(client(TOK_ADMIN).get("/ui").text)


@pytest.mark.parametrize(
    ("field", "ids"),
    [
        ("x,old-db", ["x,old-db"]),  # an id with a comma is one id: never x and old-db
        ("x\u2028old-db", ["x\u2028old-db"]),  # Unicode line separators are characters of an id
        ("x\x0bold-db\x0c", ["x\x0bold-db\x0c"]),
        ("x\u0085old-db", ["x\u0085old-db"]),
        ("a\nb\r\n  c  \n\n", ["a", "b", "c"]),  # a line each ("\r\n" from a browser's textarea)
    ],
)
def test_the_forget_form_splits_ids_on_newlines_only(field: str, ids: list[str]) -> None:
    assert list(Ask.from_form({"workspace_id": "ws-a", "entry_ids": field}).entry_ids) == ids


def test_an_id_with_a_comma_forgets_nothing_else(env: dict[str, Any]) -> None:
    """The issue's case: a bound token asks to forget `x,<victim>`; the victim's memory stays."""
    c = signed_in(env, TOK_A1)
    csrf = csrf_of(c.get("/ui/forget").text)
    form = {"csrf": csrf, "workspace_id": "ws-a", "entry_ids": "x,old-db", "confirm": "yes"}
    done = c.post("/ui/forget", data=form, follow_redirects=False)
    assert done.status_code == 303
    assert [r.selector.entry_ids for r in env["sink"].sent] == [["x,old-db"]]
    assert c.get("/ui/memory/old-db", params={"workspace_id": "ws-a"}).status_code == 200


def test_force_is_an_admins(shared: dict[str, Any]) -> None:
    """A workspace token replays its dead letters, but replaying one again (force) is refused before Kafka is
    asked anything; the form offers the box to an admin only."""
    c = signed_in(shared, TOK_A)
    csrf = csrf_of(c.get("/ui/forget").text)
    for confirm in ("", "yes"):
        r = c.post("/ui/dlq/replay", data={"csrf": csrf, "id": "0:1", "force": "1", "confirm": confirm})
        assert r.status_code == 403 and error_of(r.text).startswith("force:"), (r.status_code, error_of(r.text))


def test_a_workspace_wide_search_for_unbound_principals_only(shared: dict[str, Any]) -> None:
    """An operator searches the whole workspace (no agent given): every agent's memories. A bound token keeps
    its own scope, and asking for the workspace is a 403 naming the scope."""
    r = shared["client"].get("/ui/search", params={"workspace_id": "ws-a", "q": OOM, "k": "20"})
    assert r.status_code == 200, error_of(r.text)
    hits = set(re.findall(r'class="eid">([^<]+)</a>', r.text))
    assert {"theirs", "old-oom"} <= hits  # agent a2's and agent a1's
    admin = signed_in(shared, TOK_ADMIN).get("/ui/search", params={"workspace_id": "ws-a", "q": OOM, "k": "20"})
    assert "theirs" in admin.text
    bound = signed_in(shared, TOK_A1)
    r = bound.get("/ui/search", params={"workspace_id": "ws-a", "q": OOM, "k": "20", "scope": "workspace"})
    assert r.status_code == 403 and error_of(r.text).startswith("scope:")
    own = bound.get("/ui/search", params={"workspace_id": "ws-a", "q": OOM, "k": "20"})
    assert own.status_code == 200 and "theirs" not in own.text and "old-oom" in own.text
