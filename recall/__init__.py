"""recall: the recall HTTP service (SPEC §7): the FastAPI app over injected IO handles.

Owns: `app.py` (`create_app`, the bind check), `routes.py` (recall, render, stats, health),
`memories.py` (the memory lifecycle: forget, inspect, list; SPEC §11), `journal.py` (`POST /v1/journal`),
`whoami.py` (`GET /v1/whoami`), `deps.py` (the services a request sees).
Running it (uvicorn, `episodic serve`) is the composition root's: `stack.roles.HttpRole`.
May import: `episodic` (the core) and `schemas`; not `streams`, `consumers`, `infra` or `stack`.
"""
