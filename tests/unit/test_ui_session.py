"""The explorer's auth pieces with no IO: who sees which dead letters, the CSRF token, the login form's token."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from episodic.kernel.auth import OPEN, AuthError, Principal, TokenTable
from episodic.lifecycle.dlq import letter_of
from recall.ui.dead_letters import require_reader, visible
from recall.ui.session import COOKIE, CsrfRefused, LoginNeeded, Session

TOK = "a-workspace-token-0001"
TABLE = TokenTable.from_dict({"tokens": [{"name": "w", "token": TOK, "workspaces": ["acme"]}]})


def request(cookie: str | None = None, **headers: str) -> Request:
    raw = [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    if cookie is not None:
        raw.append((b"cookie", f"{COOKIE}={cookie}".encode()))
    return Request({"type": "http", "method": "GET", "path": "/ui", "headers": raw, "query_string": b""})


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
    mine, other = request(cookie=TOK), request(cookie="another-token-000000")
    s.check_csrf(mine, s.csrf(mine))
    with pytest.raises(CsrfRefused):
        s.check_csrf(mine, s.csrf(other))  # another session's token
    with pytest.raises(CsrfRefused):
        Session(TABLE).check_csrf(mine, s.csrf(mine))  # another process (a restart) made it
    with pytest.raises(CsrfRefused):
        s.check_csrf(request(cookie=TOK, sec_fetch_site="cross-site"), s.csrf(mine))
    with pytest.raises(CsrfRefused):
        s.check_csrf(mine, None)


def test_the_cookie_is_checked_by_the_api_lookup_and_an_open_service_needs_none() -> None:
    s = Session(TABLE)
    assert s.principal(request(cookie=TOK)).workspaces == frozenset({"acme"})
    with pytest.raises(LoginNeeded):
        s.principal(request())
    with pytest.raises(LoginNeeded, match="no longer valid"):
        s.principal(request(cookie="revoked-token-0000000"))
    with pytest.raises(AuthError):
        s.login("two words-token-0000000")
    assert s.login(f"  {TOK}\n").name == "w"  # pasted with the newline
    assert Session(None).principal(request()) is OPEN
