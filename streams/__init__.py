"""streams: the Faust app and its agents (SPEC §5): the gate, the linker and the importance agent.

Owns: `app.py` (only the faust.App), one module per agent (`gate.py`, `linker.py`, `importance.py`), the
batch transport, `runner.py` (the gate's Faust app started and stopped inside the caller's event loop) and
`agents.py` (a maintenance agent over whole batches, each in a Faust app and consumer group of its own).
May import: `episodic` (the core) and `schemas`; not `consumers`, `recall`, `infra` or `stack`.
"""
