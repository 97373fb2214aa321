"""The memory explorer: the recall service's own web pages at `/ui` (issue 28).

Owns: `routes.py` (the pages), `pages.py` (what each shows, through the API's own functions), `forgets.py`,
`unfolds.py` and `dead_letters.py` (forget, unfold and the DLQ), `session.py` (sessions and CSRF),
`signin.py` (signing in and out), `charts.py` (the SVG pictures), `templates/` (Jinja2) and `static/` (htmx,
vendored with its licence, and our CSS): every asset ships in the package, nothing is fetched at run time.
May import: what `recall` may (`episodic`, `schemas`) and `recall.deps` / `recall.memories` / `recall.views`.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from episodic.kernel.auth import TokenTable
from recall.ui import signin, unfolds
from recall.ui.routes import STATIC, router
from recall.ui.session import Session


def install(app: FastAPI, tokens: TokenTable | None) -> None:
    """Serve the explorer on `app`: its pages under /ui, its assets under /ui/static."""
    app.state.ui_session = Session(tokens)
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="ui-static")
    app.include_router(signin.router)
    app.include_router(router)
    app.include_router(unfolds.router)  # the unfold of a folded part (issue 47)


__all__ = ["install"]
