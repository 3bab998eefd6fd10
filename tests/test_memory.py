"""Peak memory per stretch of work (attnwh/memory.py): a block that holds a large buffer for a
while shows it in its peak, a block after it that does not, does not; both against the
resident set read directly while the buffer is held."""

from __future__ import annotations

import time

import pytest

from attnwh.memory import PeakMemory, gib, resident_bytes

SIZE = 256 * 2**20


def test_a_block_sees_the_memory_it_held_and_the_next_one_does_not():
    if resident_bytes() is None:
        pytest.skip("no /proc/self/statm here: only the lifetime peak is available")
    with PeakMemory() as holding:
        buffer = bytearray(SIZE)  # zero-filled: every page is touched
        held = resident_bytes()
        time.sleep(0.3)
        del buffer
    with PeakMemory() as after:
        time.sleep(0.3)
    assert holding.sampled and after.sampled
    assert holding.bytes >= held >= SIZE
    assert after.bytes < holding.bytes - SIZE // 2


def test_gib_reads_as_gib():
    assert gib(3 * 2**29) == "1.50 GiB"
