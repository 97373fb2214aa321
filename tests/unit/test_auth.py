"""Bearer tokens mapped to workspaces, admin tokens, the tokens file format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from episodic.auth import (
    OPEN,
    AuthConfigError,
    AuthError,
    TokenTable,
    authorize,
    digest,
    is_loopback,
    load_tokens,
)

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
        ({"tokens": {}}, "expected an object"),
        ({"tokens": []}, "no tokens"),
        ({"tokens": ["x"]}, r"tokens\[0\]: expected an object"),
        ({"tokens": [{"token": "short", "workspaces": ["w"]}]}, r"tokens\[0\]\.token"),
        ({"tokens": [{"token": TOK_A}]}, "needs at least one workspace"),
        ({"tokens": [{"token": TOK_A, "sha256": digest(TOK_A), "workspaces": ["w"]}]}, "exactly one"),
        ({"tokens": [{"sha256": "abc", "workspaces": ["w"]}]}, "64 hex"),
        ({"tokens": [{"token": TOK_A, "workspaces": "w"}]}, "workspaces"),
        ({"tokens": [{"token": TOK_A, "admin": "yes"}]}, "admin"),
        ({"tokens": [{"token": TOK_A, "workspaces": ["w"], "role": "x"}]}, "unknown field"),
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
