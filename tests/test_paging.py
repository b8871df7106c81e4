"""The paged pool and the replay lab 01 runs the participant's allocator in: what fits, what is preempted, and
utilization counted from the blocks handed out."""

from __future__ import annotations

import pytest

from labs_lib.claims import example_lengths
from labs_lib.paging import BlockAllocator, ContiguousAllocator, replay


def test_a_pool_exactly_full_runs_everything_at_once_and_an_overfull_one_preempts():
    requests = [(16, 16)] * 4  # each ends at 32 tokens: 2 blocks of 16
    roomy = replay(BlockAllocator(8, 16), requests, 8 * 16, 16)
    assert (roomy.peak_running, roomy.steps, roomy.preemptions) == (4, 16, 0)
    tight = replay(BlockAllocator(6, 16), requests, 6 * 16, 16)  # 4 prompts fit; their 17th tokens need 4 more
    assert tight.peak_running == 4 and tight.preemptions >= 1 and tight.steps > roomy.steps
    with pytest.raises(ValueError, match="do not fit a pool of 32"):
        replay(BlockAllocator(2, 16), [(40, 1)], 32, 16)


def test_contiguous_reserves_max_len_and_paging_fills_its_blocks():
    lengths = example_lengths(seed=1, n=120)
    requests = [(n * 3 // 4 or 1, n - n * 3 // 4 or 1) for n in lengths]
    pool = 8 * 4096
    paged = replay(BlockAllocator(pool // 16, 16), requests, pool, 16)
    contiguous = replay(ContiguousAllocator(pool // 16, 16, 4096), requests, pool, 16)
    assert contiguous.peak_running == 8 and contiguous.preemptions == 0
    assert contiguous.utilization < 0.5 < 0.9 < paged.utilization <= 1.0
    assert paged.peak_running > 3 * contiguous.peak_running and paged.steps < contiguous.steps
