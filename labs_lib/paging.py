"""A paged KV pool, block by block: the allocator vLLM's block manager is (nano-vllm's `BlockManager`, reduced
to what decides capacity), the contiguous allocation it replaced, and a replay of requests through either.

A pool holds `num_blocks` blocks of `block_size` tokens (a block: those tokens' K and V in every layer). A
request takes blocks as its tokens fill them; contiguous allocation reserves `max_len` tokens for each request
when it is admitted. The replay admits waiting requests while the pool allows, decodes one token for every
running request per step, and preempts the newest running request (back to the front of the queue, its blocks
freed, its tokens recomputed when it is readmitted) when a token finds no free block, as vLLM does."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Protocol


class Allocator(Protocol):
    """What the replay needs of a pool: admit a request's prompt, grow it by one token, release it; the tokens
    each request holds and the blocks no request holds."""

    num_tokens: dict[int, int]
    free_blocks: list[int]

    def allocate(self, request_id: int, num_tokens: int) -> bool: ...

    def append_token(self, request_id: int) -> bool: ...

    def free(self, request_id: int) -> None: ...


class BlockAllocator:
    """A paged KV pool of num_blocks blocks of block_size tokens. `block_tables[r]`: request r's block ids in
    order; `free_blocks`: the ids no request holds; `num_tokens[r]`: the tokens request r holds."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.block_size = block_size
        self.free_blocks: list[int] = list(range(num_blocks))
        self.block_tables: dict[int, list[int]] = {}
        self.num_tokens: dict[int, int] = {}

    def allocate(self, request_id: int, num_tokens: int) -> bool:
        """Admit a request of num_tokens tokens: ceil(num_tokens / block_size) blocks. False, taking nothing,
        when fewer are free."""
        needed = math.ceil(num_tokens / self.block_size)
        if needed > len(self.free_blocks):
            return False
        self.block_tables[request_id] = [self.free_blocks.pop() for _ in range(needed)]
        self.num_tokens[request_id] = num_tokens
        return True

    def append_token(self, request_id: int) -> bool:
        """One token more for the request: a new block only when its last one is full. False, changing
        nothing, when that block is needed and none is free."""
        if self.num_tokens[request_id] % self.block_size == 0:  # the last block is full (or there is none)
            if not self.free_blocks:
                return False
            self.block_tables[request_id].append(self.free_blocks.pop())
        self.num_tokens[request_id] += 1
        return True

    def free(self, request_id: int) -> None:
        """The request is done (or preempted): its blocks go back to the pool."""
        self.free_blocks.extend(self.block_tables.pop(request_id))
        del self.num_tokens[request_id]


class ContiguousAllocator(BlockAllocator):
    """The allocation paging replaced: each request reserves max_len tokens (whole blocks) when admitted."""

    def __init__(self, num_blocks: int, block_size: int, max_len: int) -> None:
        super().__init__(num_blocks, block_size)
        self.max_len = max_len

    def allocate(self, request_id: int, num_tokens: int) -> bool:
        """Reserve max_len tokens' blocks, whatever the prompt's length."""
        return super().allocate(request_id, self.max_len) and self._hold(request_id, num_tokens)

    def _hold(self, request_id: int, num_tokens: int) -> bool:
        self.num_tokens[request_id] = num_tokens
        return True

    def append_token(self, request_id: int) -> bool:
        """One token more, inside the reservation: False at max_len."""
        if self.num_tokens[request_id] >= self.max_len:
            return False
        self.num_tokens[request_id] += 1
        return True


@dataclass(frozen=True)
class Replay:
    """Requests replayed through one allocator: `peak_running` (most requests decoding in one step),
    `mean_running`, `steps` (decode steps until every request finished), `preemptions`, and `utilization`
    (tokens held / tokens the pool had handed out, averaged over steps)."""

    allocator: str
    peak_running: int
    mean_running: float
    steps: int
    preemptions: int
    utilization: float


def replay(allocator: Allocator, requests: list[tuple[int, int]], pool_tokens: int, block_size: int, name: str = "") -> Replay:
    """Replay `requests` ((prompt tokens, output tokens) each, all waiting at the start) through `allocator`, a
    pool of pool_tokens // block_size blocks. A preempted request is readmitted with its prompt and the tokens it
    had generated (recomputed). Utilization reads the allocator's `num_tokens` against the blocks taken: the
    pool's blocks less its `free_blocks`."""
    num_blocks = pool_tokens // block_size
    waiting: deque[int] = deque(range(len(requests)))
    left = {rid: output for rid, (_, output) in enumerate(requests)}  # output tokens still to generate
    running: list[int] = []  # in admission order: the last is the newest, preempted first
    steps = preemptions = peak = 0
    running_sum = utilization_sum = 0.0
    while waiting or running:
        while waiting and allocator.allocate(waiting[0], sum(requests[waiting[0]]) - left[waiting[0]]):
            running.append(waiting.popleft())
        if not running:  # the first waiting request does not fit an empty pool: it never will
            raise ValueError(f"request {waiting[0]}: {requests[waiting[0]][0]} tokens do not fit a pool of {pool_tokens}")
        peak, running_sum = max(peak, len(running)), running_sum + len(running)
        for rid in list(running):
            if rid not in running:
                continue  # preempted earlier in this step
            while not allocator.append_token(rid):  # no free block: preempt the newest (this one, at worst)
                victim = running.pop()
                allocator.free(victim)
                waiting.appendleft(victim)
                preemptions += 1
                if victim == rid:
                    break
            if rid in running:
                left[rid] -= 1
                if left[rid] == 0:
                    allocator.free(rid)
                    running.remove(rid)
        steps += 1
        held, taken = sum(allocator.num_tokens.values()), num_blocks - len(allocator.free_blocks)
        utilization_sum += held / (taken * block_size) if taken else 1.0
    return Replay(name or type(allocator).__name__, peak, running_sum / steps, steps, preemptions, utilization_sum / steps)
