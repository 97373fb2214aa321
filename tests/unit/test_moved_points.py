"""What the embedded store's dense queries scan between index cycles: the distinct points written since the
last cycle began (episodic.store.edge_index.MovedPoints), pure bookkeeping."""

from __future__ import annotations

from pathlib import Path

from episodic.store.edge_index import BurstWait, MovedPoints, load_moved, moved_path, save_moved


def test_each_point_counts_once_whatever_writes_it() -> None:
    moved = MovedPoints(cap=10)
    moved.add(["a", "b"])
    moved.add(["a"])  # a payload write after the upsert: the point has moved already
    moved.add(iter(["b", "c"]))
    assert moved.count == 3


def test_the_count_stops_at_the_cap_and_keeps_no_more_ids() -> None:
    moved = MovedPoints(cap=3)
    moved.add(str(i) for i in range(1_000))
    assert moved.count == 3 and len(moved._ids) == 3
    assert MovedPoints(cap=0).count == 0  # a shard never indexed counts nothing
    none = MovedPoints()
    none.add(["a"])
    none.add_unknown(5)
    assert none.count == 0


def test_a_cycle_counts_from_its_copy_and_a_failed_one_gives_its_count_back() -> None:
    moved = MovedPoints(cap=100, carried=4)
    moved.add(["a", "b"])
    assert moved.count == 6
    before = moved.begin()
    assert moved.count == 0
    moved.add(["b", "z"])  # written while the copy is built: replayed into the new shard, unindexed
    assert moved.count == 2
    writes = moved.writes
    moved.restore(before)  # the build failed: all of it is still scanned, "b" once
    assert moved.count == 4 + 3
    assert moved.writes == writes  # nothing was written by the restore: no burst from it


def test_writes_by_a_filter_without_ids_count_what_they_match() -> None:
    moved = MovedPoints(cap=50)
    moved.add_unknown(30)
    moved.add(["a"])
    moved.add_unknown(-3)  # garbage from a count: ignored
    assert moved.count == 31
    moved.add_unknown(1_000)
    assert moved.count == 50


def test_the_count_is_kept_beside_the_shard(tmp_path: Path) -> None:
    shard = tmp_path / "episodic_memories"
    assert load_moved(shard) == 0  # never saved
    save_moved(shard, 1234)
    assert load_moved(shard) == 1234 and moved_path(shard).name == "episodic_memories.moved"
    for garbage in ("", "{", '{"moved": "x"}', "[]", '{"other": 1}', '{"moved": -5}'):
        moved_path(shard).write_text(garbage)
        assert load_moved(shard) == 0, garbage
    assert MovedPoints(cap=10, carried=99).count == 10  # a count saved under a larger cap


def test_every_write_is_counted_past_the_cap_for_the_write_rate() -> None:
    moved = MovedPoints(cap=2)
    moved.add(["a", "b", "c", "a"])
    moved.add_unknown(3)
    assert moved.count == 2 and moved.writes == 7


def test_a_burst_of_writes_holds_the_cycle_back_for_a_while_only() -> None:
    now = [0.0]
    burst = BurstWait(rate=100.0, max_wait_s=60.0, clock=lambda: now[0])
    assert not burst.holds(0)  # the first check has no rate yet
    now[0] = 5.0
    assert not burst.holds(400)  # 80 a second: ingestion, not a burst
    now[0] = 10.0
    assert burst.holds(400 + 12_000)  # the decay: 2,400 a second
    for t in (15.0, 40.0, 69.0):
        now[0] = t
        assert burst.holds(int(t * 10_000))  # still writing that fast
    now[0] = 71.0
    assert not burst.holds(710_000)  # waited 60 s: the cycle runs anyway
    now[0] = 76.0
    assert not burst.holds(710_050)  # the burst is over
    now[0] = 81.0
    assert burst.holds(800_000)  # a new burst waits again
    now[0] = 81.0
    assert not burst.holds(900_000)  # no time passed: no rate (a clock that did not move)


def test_a_bulk_writer_holds_the_cycle_back_at_any_rate_until_it_has_been_quiet() -> None:
    """The decay slowed to 350 writes a second under the daily health run: no burst by its rate, yet a cycle
    begun under it replays the rest of its writes into the new shard's unindexed segment."""
    now = [0.0]
    burst = BurstWait(rate=500.0, max_wait_s=60.0, clock=lambda: now[0], quiet_s=15.0)
    assert not burst.holds(0)
    for t in (1.0, 10.0, 20.0):  # a page of the decay every few seconds
        now[0] = t
        burst.bulk()
        assert burst.holds(int(t * 350))  # 350 a second: slow, but a bulk writer is writing
    now[0] = 34.0
    assert burst.holds(7_000)  # its last page 14 s ago: not quiet yet
    now[0] = 36.0
    assert not burst.holds(7_000)  # quiet for 16 s: the cycle may run
    burst.bulk()
    for t in (40.0, 90.0, 95.0):
        now[0] = t
        burst.bulk()
        assert burst.holds(7_000) is (t - 36.0 < 60.0)  # never past max_wait_s: a bulk writer that never stops
