"""stack.heap: the started stack's heap leaves the collector's full passes, only when the process's own
entry point asks (issue 46 item 5)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from stack import heap


@pytest.fixture
def thawed() -> Iterator[None]:
    """The test process's collector as it was: nothing frozen before, everything thawed after."""
    gc.unfreeze()
    yield
    gc.unfreeze()
    heap._wanted = False


def test_a_stack_inside_another_program_leaves_its_collector_alone(thawed: None) -> None:
    assert heap.settle() == 0
    assert gc.get_freeze_count() == 0


def test_the_entry_points_freeze_what_is_alive_once_started_and_only_once(thawed: None) -> None:
    kept = [[i] for i in range(100)]  # alive now: frozen with the rest
    heap.freeze_when_started()
    frozen = heap.settle()
    assert frozen == gc.get_freeze_count() > len(kept)
    walked = {id(o) for o in gc.get_objects()}  # what a collection walks: not the frozen
    assert not any(id(k) in walked for k in kept)
    assert id(young := [0]) in {id(o) for o in gc.get_objects()} and young  # what is made later is walked
    assert heap.settle() == 0 and gc.get_freeze_count() == frozen  # once per process


@pytest.mark.parametrize("module", ["stack.commands.up", "stack.commands.run"])
def test_up_and_run_ask_for_it_before_they_start_the_stack(module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    mod = importlib.import_module(module)
    seen: list[bool] = []

    async def run_stack(*args: object, **kw: object) -> int:
        seen.append(heap._wanted)
        return 0

    monkeypatch.setattr(mod, "run_stack", run_stack)
    monkeypatch.setattr(mod, "setup_logging", lambda level: None)
    monkeypatch.setenv("EPISODIC_KAFKA_BOOTSTRAP", "127.0.0.1:9")  # `run` wants a shared Kafka; none is reached
    argv = [] if module.endswith("up") else ["http", "--insecure"]
    try:
        assert mod.main(argv) == 0
    finally:
        heap._wanted = False
    assert seen == [True]
