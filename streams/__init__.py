"""streams: the Faust app and its agents (SPEC §5): the gate today; nudge, linker, importance and health later.

Owns: `app.py` (only the faust.App), one module per agent (`gate.py`), the batch transport, and
`runner.py` (a Faust app started and stopped inside the caller's event loop).
May import: `episodic` (the core) and `schemas`; not `consumers`, `recall`, `infra` or `stack`.
"""
