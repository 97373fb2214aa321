"""The explorer's auth pieces with no IO: who sees which dead letters, the CSRF token, the login form's token."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from episodic.kernel.auth import OPEN, AuthError, Principal, TokenTable
from episodic.lifecycle.dlq import letter_of
from recall.ui.dead_letters import require_reader, visible
from recall.ui.session import BROWSER, COOKIE, SESSION_TTL, CsrfRefused, LoginNeeded, Session, secure_cookie

TOK = "a-workspace-token-0001"
TABLE = TokenTable.from_dict({"tokens": [{"name": "w", "token": TOK, "workspaces": ["acme"]}]})


def request(cookie: str | None = None, *, browser: str | None = None, host: str = "127.0.0.1:8080",
            scheme: str = "http", **headers: str) -> Request:  # fmt: skip
    raw = [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()] + [(b"host", host.encode())]
    cookies = [f"{COOKIE}={cookie}"] if cookie is not None else []
    cookies += [f"{BROWSER}={browser}"] if browser is not None else []
    if cookies:
        raw.append((b"cookie", "; ".join(cookies).encode()))
    scope = {"type": "http", "method": "GET", "path": "/ui", "headers": raw, "query_string": b"", "scheme": scheme,
             "server": (host.split(":")[0], 8080)}  # fmt: skip
    return Request(scope)


def dead(workspace: str | None) -> bytes:
    import base64
    import json

    raw = json.dumps({"id": "x1", "workspace_id": workspace}).encode() if workspace else b"\xff\xfe"
    return json.dumps({"reason": "bad_severity", "error": "e", "source": {"topic": "journal.entries", "partition": 0,
                       "offset": 1}, "raw_b64": base64.b64encode(raw).decode(),
                       "raw_text": raw.decode() if workspace else None}).encode()  # fmt: skip


def test_dead_letters_are_seen_by_admins_all_and_by_a_workspace_token_its_own() -> None:
    ours, theirs, garbage = (letter_of(0, n, None, None, dead(ws)) for n, ws in enumerate(["acme", "globex", None]))
    ws_token = Principal("w", frozenset({"acme"}))
    assert [visible(OPEN, x) for x in (ours, theirs, garbage)] == [True, True, True]
    assert [visible(ws_token, x) for x in (ours, theirs, garbage)] == [True, False, False]
    with pytest.raises(AuthError) as e:
        require_reader(Principal("a", frozenset({"acme"}), agent_id="planner", role="agent"))
    assert e.value.status == 403 and e.value.message.startswith("dlq:")


def test_the_csrf_token_belongs_to_the_session_and_the_process() -> None:
    s = Session(TABLE)
    _, sid = s.login(TOK)
    _, other_sid = s.login(TOK)
    mine, other = request(cookie=sid), request(cookie=other_sid)
    s.check_csrf(mine, s.csrf(mine))
    with pytest.raises(CsrfRefused):
        s.check_csrf(mine, s.csrf(other))  # another session's token
    with pytest.raises(CsrfRefused):
        Session(TABLE).check_csrf(mine, s.csrf(mine))  # another process (a restart) made it
    with pytest.raises(CsrfRefused):
        s.check_csrf(request(cookie=sid, sec_fetch_site="cross-site"), s.csrf(mine))
    with pytest.raises(CsrfRefused):
        s.check_csrf(mine, None)
    with pytest.raises(CsrfRefused):
        s.check_csrf(mine, "é" * 64)  # beyond ASCII: refused (compare_digest raised TypeError on str: a 500)


def test_the_login_form_has_a_csrf_token_of_its_browser() -> None:
    """Before signing in there is no session: the browser's own id cookie is the seed (login CSRF)."""
    s = Session(TABLE)
    first = request()
    token = s.csrf(first)  # a new browser: an id is made for it, and the page sets its cookie
    made = first.state.new_browser_id
    s.check_csrf(request(browser=made), token)
    with pytest.raises(CsrfRefused):
        s.check_csrf(request(browser="another-browser"), token)
    with pytest.raises(CsrfRefused):
        s.check_csrf(request(), token)  # no cookie: a form posted by a page that never loaded ours


def test_the_cookie_holds_a_session_id_the_server_ends() -> None:
    now = [1000.0]
    s = Session(TABLE, clock=lambda: now[0])
    principal, sid = s.login(f"  {TOK}\n")  # pasted with the newline
    assert principal.name == "w" and sid != TOK and len(sid) >= 40
    assert s.principal(request(cookie=sid)).workspaces == frozenset({"acme"})
    with pytest.raises(LoginNeeded):
        s.principal(request())
    with pytest.raises(LoginNeeded, match="session has ended"):
        s.principal(request(cookie=TOK))  # the raw token is no session
    s.logout(request(cookie=sid))
    with pytest.raises(LoginNeeded, match="session has ended"):
        s.principal(request(cookie=sid))  # revoked at logout: the old cookie is worth nothing
    _, sid = s.login(TOK)
    now[0] += SESSION_TTL + 1
    with pytest.raises(LoginNeeded, match="session has ended"):
        s.principal(request(cookie=sid))  # expired
    with pytest.raises(AuthError):
        s.login("two words-token-0000000")
    assert Session(None).principal(request()) is OPEN


@pytest.mark.parametrize(
    ("host", "scheme", "headers", "secure"),
    [
        ("127.0.0.1:8080", "http", {}, False),
        ("localhost:8080", "http", {}, False),
        ("[::1]:8080", "http", {}, False),
        ("127.0.0.1:8080", "https", {}, True),
        ("memory.example:8080", "http", {}, True),  # beyond loopback: never sent back over plain http
        ("127.0.0.1:8080", "http", {"x_forwarded_proto": "https"}, True),
    ],
)
def test_the_session_cookie_is_secure_unless_plain_http_on_loopback(
    host: str, scheme: str, headers: dict[str, str], secure: bool
) -> None:
    assert secure_cookie(request(host=host, scheme=scheme, **headers)) is secure
