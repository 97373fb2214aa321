"""DNS rebinding: without a tokens file (every caller is admin) the stack's service answers only requests
addressed to a loopback name, so a web page whose own name resolves to 127.0.0.1 cannot read or forget."""

from __future__ import annotations

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from recall.app import LoopbackNamesOnly, host_name


def app() -> LoopbackNamesOnly:
    async def ok(request: object) -> PlainTextResponse:
        return PlainTextResponse("ok")

    return LoopbackNamesOnly(Starlette(routes=[Route("/v1/x", ok, methods=["GET", "POST"])]))


@pytest.mark.parametrize(
    ("host", "name"),
    [
        ("localhost:8080", "localhost"), ("[::1]:80", "::1"), ("127.0.0.1", "127.0.0.1"),
        ("evil.example:80", "evil.example"), ("", ""),
    ],
)  # fmt: skip
def test_host_name(host: str, name: str) -> None:
    assert host_name(host) == name


@pytest.mark.parametrize("host", ["localhost:8080", "127.0.0.1:9", "127.3.4.5", "[::1]:8080", "LOCALHOST"])
async def test_loopback_names_pass(host: str) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app()), base_url="http://x") as c:
        r = await c.get("/v1/x", headers={"host": host})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("host", ["rebind.example:8080", "10.0.0.1", "127.0.0.1.evil.example", "", "[::2]:80"])
async def test_other_names_are_refused(host: str) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app()), base_url="http://x") as c:
        r = await c.post("/v1/x", headers={"host": host})
    assert r.status_code == 421, r.text
    assert "loopback" in r.json()["error"]
