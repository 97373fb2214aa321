"""The read-write lock of the Qdrant Edge backend: data calls share the shard, its lifecycle holds it alone."""

from __future__ import annotations

import threading
import time

from episodic.store.rwlock import ReadWriteLock


def test_sharers_overlap_and_an_exclusive_holder_waits_for_them() -> None:
    lock = ReadWriteLock()
    inside = threading.Barrier(3, timeout=5)  # three sharers inside at once, or this times out
    events: list[str] = []

    def share(i: int) -> None:
        with lock.shared():
            inside.wait()
            time.sleep(0.1)
            events.append(f"shared-{i}-out")

    sharers = [threading.Thread(target=share, args=(i,)) for i in range(3)]
    for t in sharers:
        t.start()
    time.sleep(0.05)

    def alone() -> None:
        with lock.exclusive():
            events.append("exclusive-in")

    closer = threading.Thread(target=alone)
    closer.start()
    for t in [*sharers, closer]:
        t.join(5)
    assert events[-1] == "exclusive-in" and len(events) == 4  # after every sharer left


def test_a_waiting_exclusive_holder_goes_before_new_sharers() -> None:
    lock = ReadWriteLock()
    order: list[str] = []
    first_in = threading.Event()
    release = threading.Event()

    def first() -> None:
        with lock.shared():
            first_in.set()
            release.wait(5)
        order.append("first-out")

    def closer() -> None:
        with lock.exclusive():
            order.append("exclusive")

    def late() -> None:
        with lock.shared():
            order.append("late-sharer")

    threads = [threading.Thread(target=first)]
    threads[0].start()
    first_in.wait(5)
    threads.append(threading.Thread(target=closer))
    threads[1].start()
    time.sleep(0.05)  # the closer is waiting now
    threads.append(threading.Thread(target=late))
    threads[2].start()
    time.sleep(0.05)
    assert order == []  # the late sharer queues behind the waiting exclusive holder
    release.set()
    for t in threads:
        t.join(5)
    assert order == ["first-out", "exclusive", "late-sharer"]
