"""Bearer tokens mapped to workspaces, admin tokens, tokens bound to an agent and a role, the tokens file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from episodic.kernel.auth import (
    OPEN,
    AuthConfigError,
    AuthError,
    Principal,
    TokenTable,
    authorize,
    authorize_memory,
    authorize_recall,
    authorize_write,
    digest,
    forget_narrowed,
    listing_narrowed,
    load_tokens,
    may_see_memory,
    scope_for_role,
)
from episodic_client.settings import is_loopback

TOK_A = "token-for-workspace-a"
TOK_BC = "token-for-workspaces-b-and-c"
TOK_ADMIN = "the-admin-token-0123"
HASHED = "a-hashed-token-only-its-digest-is-stored"


@pytest.fixture
def table() -> TokenTable:
    return TokenTable.from_dict(
        {
            "tokens": [
                {"name": "a", "token": TOK_A, "workspaces": ["ws-a"]},
                {"name": "bc", "token": TOK_BC, "workspaces": ["ws-b", "ws-c"]},
                {"name": "ops", "token": TOK_ADMIN, "admin": True},
                {"name": "hashed", "sha256": digest(HASHED).upper(), "workspaces": ["ws-h"]},
            ]
        }
    )


def test_token_maps_to_its_workspaces(table: TokenTable) -> None:
    p = table.authenticate(f"Bearer {TOK_BC}")
    assert p.name == "bc" and not p.admin
    authorize(p, "ws-b")
    authorize(p, "ws-c")
    with pytest.raises(AuthError) as e:
        authorize(p, "ws-a")
    assert e.value.status == 403 and e.value.reason == "forbidden"


def test_admin_reads_everything(table: TokenTable) -> None:
    p = table.authenticate(f"bearer  {TOK_ADMIN} ")
    assert p.admin
    authorize(p, "anything")
    authorize(p, None)


def test_non_admin_cannot_read_across_workspaces(table: TokenTable) -> None:
    with pytest.raises(AuthError) as e:
        authorize(table.authenticate(f"Bearer {TOK_A}"), None)
    assert e.value.status == 403


def test_hashed_token(table: TokenTable) -> None:
    assert table.authenticate(f"Bearer {HASHED}").name == "hashed"


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        (None, "missing"),
        ("", "missing"),
        ("   ", "missing"),
        ("Bearer", "invalid"),
        ("Bearer ", "invalid"),
        (f"Basic {TOK_A}", "invalid"),
        (TOK_A, "invalid"),
        ("Bearer not-a-known-token-at-all", "invalid"),
        (f"Bearer {TOK_A} extra", "invalid"),
        (f"Bearer {TOK_A.upper()}", "invalid"),
    ],
)
def test_rejected_headers_are_401(table: TokenTable, header: str | None, reason: str) -> None:
    with pytest.raises(AuthError) as e:
        table.authenticate(header)
    assert e.value.status == 401
    assert e.value.reason == reason


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ([], "expected an object"),
        ({"tokens": {}}, r"tokens: expected a list"),
        ({"tokens": []}, "no tokens"),
        ({"tokens": ["x"]}, r"tokens\[0\]: expected an object"),
        ({"tokens": [{"token": "short", "workspaces": ["w"]}]}, r"tokens\[0\]\.token"),
        ({"tokens": [{"token": TOK_A}]}, "needs at least one workspace"),
        ({"tokens": [{"token": TOK_A, "sha256": digest(TOK_A), "workspaces": ["w"]}]}, "exactly one"),
        ({"tokens": [{"sha256": "abc", "workspaces": ["w"]}]}, "64 hex"),
        ({"tokens": [{"token": TOK_A, "workspaces": "w"}]}, "workspaces"),
        ({"tokens": [{"token": TOK_A, "admin": "yes"}]}, "admin"),
        ({"tokens": [{"token": TOK_A, "workspaces": ["w"], "rol": "x"}]}, r"tokens\[0\]\.rol: unknown field"),
        ({"tokens": [{"token": TOK_A, "workspaces": ["w"], "role": "x"}]}, r"tokens\[0\]\.role: .*'agent' or 'lead'"),
        ({"tokens": [{"token": TOK_A, "workspaces": ["w"], "role": "agent"}]}, "role 'agent' needs agent_id"),
        ({"tokens": [{"token": TOK_A, "workspaces": ["w"], "role": "lead"}]}, "role 'lead' needs crew_id"),
        ({"tokens": [{"token": TOK_A, "workspaces": ["w"], "crew_id": "c"}]}, "crew_id binds a token only with a role"),
        ({"tokens": [{"token": TOK_A, "admin": True, "agent_id": "a"}]}, "admin token cannot be bound"),
        ({"tokens": [{"token": TOK_A, "workspaces": [""]}]}, r"tokens\[0\]\.workspaces\[0\]"),
        ({"tokens": [{"token": f" {TOK_A}", "workspaces": ["w"]}]}, "surrounding whitespace"),
        ({"tokens": [{"token": 1234567890123456789, "workspaces": ["w"]}]}, r"tokens\[0\]\.token"),
        (
            {"tokens": [{"token": TOK_A, "workspaces": ["w"]}, {"token": TOK_A, "workspaces": ["v"]}]},
            "duplicate",
        ),
    ],
)
def test_bad_files_are_refused(data: object, match: str) -> None:
    with pytest.raises(AuthConfigError, match=match):
        TokenTable.from_dict(data)


def test_load_from_file(tmp_path: Path) -> None:
    f = tmp_path / "tokens.json"
    f.write_text(json.dumps({"tokens": [{"token": TOK_A, "workspaces": ["ws-a"]}]}))
    t = load_tokens(f)
    assert t is not None and len(t) == 1 and t.admins == 0
    assert load_tokens(None) is None
    with pytest.raises(AuthConfigError, match="cannot read"):
        load_tokens(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(AuthConfigError, match="not JSON"):
        load_tokens(tmp_path / "bad.json")


def test_open_principal_reads_everything() -> None:
    authorize(OPEN, "any")
    authorize(OPEN, None)


@pytest.mark.parametrize(
    ("host", "loop"),
    [("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("[::1]", True), ("localhost", True),
     ("0.0.0.0", False), ("::", False), ("10.0.0.5", False), ("example.com", False)],
)  # fmt: skip
def test_is_loopback(host: str, loop: bool) -> None:
    assert is_loopback(host) is loop


def test_a_bad_file_lists_every_problem_and_never_echoes_a_secret() -> None:
    secret = "short-secret"
    with pytest.raises(AuthConfigError) as e:
        TokenTable.from_dict({"tokens": [{"token": secret, "workspaces": ["w"]}, {"sha256": "xyz"}]})
    message = str(e.value)
    assert "tokens[0].token: must be a string of at least 16 characters" in message
    assert "tokens[1].sha256: must be 64 hex characters" in message
    assert secret not in message


BOUND = TokenTable.from_dict(
    {
        "tokens": [
            {"name": "planner", "token": "planner-token-0123456", "workspaces": ["ws-a"], "agent_id": "planner",
             "crew_id": "platform"},
            {"name": "lead", "token": "lead-token-0123456789", "workspaces": ["ws-a"], "agent_id": "lead-1",
             "role": "lead", "crew_id": "platform"},
            {"name": "crew-lead", "token": "crew-lead-token-01234", "workspaces": ["ws-a"], "role": "lead",
             "crew_id": "platform"},
            {"name": "orchestrator", "token": "orchestrator-token-01", "workspaces": ["ws-a"]},
        ]
    }
)  # fmt: skip


def who(token: str) -> Principal:
    return BOUND.authenticate(f"Bearer {token}")


def test_agent_id_alone_binds_a_token_to_role_agent() -> None:
    p = who("planner-token-0123456")
    assert p.bound and p.role == "agent" and p.agent_id == "planner" and p.crew_id == "platform"
    assert scope_for_role(p.role) == "own" and scope_for_role("lead") == "crew_shared" and scope_for_role(None) == "own"
    assert BOUND.bound == 3 and not who("orchestrator-token-01").bound


def refusal(principal: Principal, **req: Any) -> AuthError:
    body: dict[str, Any] = {"workspace_id": "ws-a", "scope": "own", "agent_id": None, "crew_id": None, **req}
    with pytest.raises(AuthError) as e:
        authorize_recall(principal, **body)
    assert e.value.status == 403 and e.value.reason == "forbidden"
    return e.value


def test_a_bound_agent_reads_only_its_own_memories() -> None:
    p = who("planner-token-0123456")
    authorize_recall(p, workspace_id="ws-a", scope="own", agent_id="planner", crew_id=None)
    authorize_recall(p, workspace_id="ws-a", scope="own", agent_id="planner", crew_id="platform")
    e = refusal(p, agent_id="coder")
    assert e.field == "agent_id" and str(e) == (
        "agent_id: token 'planner' is bound to agent 'planner'; it may not read agent 'coder'"
    )
    e = refusal(p, scope="crew_shared", agent_id="planner", crew_id="platform")
    assert e.field == "scope" and "whose widest scope is 'own'" in str(e)
    assert refusal(p, agent_id="planner", crew_id="other").field == "crew_id"
    assert refusal(p, workspace_id="ws-b", agent_id="planner").field == "workspace_id"


def test_a_lead_reads_its_crew_and_no_other() -> None:
    lead = who("lead-token-0123456789")
    authorize_recall(lead, workspace_id="ws-a", scope="crew_shared", agent_id="lead-1", crew_id="platform")
    authorize_recall(lead, workspace_id="ws-a", scope="crew_shared", agent_id=None, crew_id="platform")
    authorize_recall(lead, workspace_id="ws-a", scope="own", agent_id="lead-1", crew_id=None)
    assert refusal(lead, scope="crew_shared", agent_id="lead-1", crew_id="billing").field == "crew_id"
    assert refusal(lead, scope="crew_shared", agent_id="planner", crew_id="platform").field == "agent_id"
    crew_only = who("crew-lead-token-01234")
    e = refusal(crew_only, scope="crew_shared", agent_id="planner", crew_id="platform")
    assert e.field == "agent_id" and "without an agent: leave agent_id out" in str(e)


def test_an_unbound_workspace_token_keeps_the_workspace_rule_only() -> None:
    p = who("orchestrator-token-01")
    for agent in ("planner", "coder"):
        authorize_recall(p, workspace_id="ws-a", scope="own", agent_id=agent, crew_id=None)
    authorize_recall(p, workspace_id="ws-a", scope="crew_shared", agent_id=None, crew_id="any-crew")
    assert refusal(p, workspace_id="ws-b", agent_id="planner").field == "workspace_id"


def test_writes_go_to_the_token_workspace_and_a_bound_token_writes_as_itself() -> None:
    authorize_write(who("orchestrator-token-01"), workspace_id="ws-a", agent_id="anyone", crew_id="any")
    authorize_write(who("planner-token-0123456"), workspace_id="ws-a", agent_id="planner", crew_id=None)
    authorize_write(who("planner-token-0123456"), workspace_id="ws-a", agent_id="planner", crew_id="platform")
    cases = [
        ("orchestrator-token-01", {"workspace_id": "ws-b", "agent_id": "x", "crew_id": None}, "workspace_id"),
        ("planner-token-0123456", {"workspace_id": "ws-a", "agent_id": "coder", "crew_id": None}, "agent_id"),
        ("planner-token-0123456", {"workspace_id": "ws-a", "agent_id": "planner", "crew_id": "b"}, "crew_id"),
        ("crew-lead-token-01234", {"workspace_id": "ws-a", "agent_id": "planner", "crew_id": None}, "agent_id"),
    ]
    for token, entry, field in cases:
        with pytest.raises(AuthError) as e:
            authorize_write(who(token), **entry)
        assert e.value.field == field and e.value.status == 403
        assert e.value.at("entries[3]").message.startswith(f"entries[3].{field}: ")
    with pytest.raises(AuthError, match="may not write workspace 'ws-b'"):
        authorize_write(who("orchestrator-token-01"), workspace_id="ws-b", agent_id="x", crew_id=None)


def test_a_bad_file_on_disk_names_the_file(tmp_path: Path) -> None:
    f = tmp_path / "tokens.json"
    f.write_text(json.dumps({"tokens": [{"token": TOK_A, "workspaces": ["w"], "role": "lead"}]}))
    with pytest.raises(AuthConfigError, match=r"tokens.json: tokens file: tokens\[0\]: role 'lead' needs crew_id"):
        load_tokens(f)


# -- the memory lifecycle (inspect, list, forget) -------------------------------------------------------------
PLANNER, LEAD, CREW_LEAD, ORCH = (
    who(t) for t in ("planner-token-0123456", "lead-token-0123456789", "crew-lead-token-01234", "orchestrator-token-01")
)


def forbidden(fn: Any, *args: Any, **kw: Any) -> AuthError:
    with pytest.raises(AuthError) as e:
        fn(*args, **kw)
    assert e.value.status == 403
    return e.value


def test_a_bound_token_inspects_its_agents_memories_and_a_lead_its_crews() -> None:
    cases = [  # (principal, memory's agent, memory's crew, may see)
        (PLANNER, "planner", None, True), (PLANNER, "planner", "billing", True), (PLANNER, "coder", "platform", False),
        (LEAD, "lead-1", "billing", True), (LEAD, "coder", "platform", True), (LEAD, "coder", "billing", False),
        (CREW_LEAD, "coder", "platform", True), (CREW_LEAD, None, None, False),
        (ORCH, "anyone", "any", True), (OPEN, None, None, True),
    ]  # fmt: skip
    for principal, agent, crew, allowed in cases:
        assert may_see_memory(principal, agent_id=agent, crew_id=crew) is allowed, (principal.name, agent, crew)
    e = forbidden(authorize_memory, PLANNER, entry_id="e7", agent_id="coder", crew_id="platform")
    assert str(e) == "entry_id: token 'planner' is bound to agent 'planner'; memory 'e7' is not one of its memories"


def test_a_bound_tokens_listing_is_narrowed_to_its_agent_or_crew() -> None:
    assert listing_narrowed(ORCH, agent_id=None, crew_id=None) == (None, None)
    assert listing_narrowed(ORCH, agent_id="coder", crew_id="x") == ("coder", "x")
    assert listing_narrowed(PLANNER, agent_id=None, crew_id=None) == ("planner", None)
    assert listing_narrowed(PLANNER, agent_id="planner", crew_id="platform") == ("planner", "platform")
    assert listing_narrowed(LEAD, agent_id=None, crew_id=None) == (None, "platform")
    assert listing_narrowed(LEAD, agent_id="coder", crew_id=None) == ("coder", "platform")
    assert listing_narrowed(LEAD, agent_id="lead-1", crew_id=None) == ("lead-1", None)  # all of its own
    assert listing_narrowed(CREW_LEAD, agent_id=None, crew_id="platform") == (None, "platform")
    assert forbidden(listing_narrowed, PLANNER, agent_id="coder", crew_id=None).field == "agent_id"
    assert forbidden(listing_narrowed, LEAD, agent_id=None, crew_id="billing").field == "crew_id"


def test_a_bound_token_forgets_only_its_own_agents_memories() -> None:
    assert forget_narrowed(ORCH, selector_field="run_id", agent_id=None, all=False) is None
    assert forget_narrowed(ORCH, selector_field="agent_id", agent_id="coder", all=False) == "coder"
    assert forget_narrowed(ORCH, selector_field="all", agent_id=None, all=True) is None
    for principal in (PLANNER, LEAD):
        mine = principal.agent_id
        assert forget_narrowed(principal, selector_field="run_id", agent_id=None, all=False) == mine
        assert forget_narrowed(principal, selector_field="entry_ids", agent_id=None, all=False) == mine
        assert forget_narrowed(principal, selector_field="agent_id", agent_id=mine, all=False) == mine
        e = forbidden(forget_narrowed, principal, selector_field="all", agent_id=None, all=True)
        assert e.field == "all" and "only a workspace or admin token may forget a workspace" in str(e)
        assert forbidden(forget_narrowed, principal, selector_field="agent_id", agent_id="x", all=False).field == (
            "agent_id"
        )
    e = forbidden(forget_narrowed, CREW_LEAD, selector_field="run_id", agent_id=None, all=False)
    assert e.field == "run_id" and "without an agent: it may forget no memories" in str(e)
