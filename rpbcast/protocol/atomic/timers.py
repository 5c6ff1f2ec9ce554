"""One timer heap for the atomic layer's parts: a part schedules a call and
checks, when it runs, whether it still matters (no cancellation: the state
it looks at says so), so the engine asks one number per event."""
from __future__ import annotations

import heapq
from typing import Callable

NEVER = 1 << 62


class Timers:
    def __init__(self):
        self._heap = []
        self._n = 0

    def at(self, t: int, fn: Callable, *args):
        self._n += 1
        heapq.heappush(self._heap, (int(t), self._n, fn, args))

    def next(self) -> int:
        return self._heap[0][0] if self._heap else NEVER

    def run(self, now: int):
        """Every call due by now, in time order (calls may schedule more)."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, fn, args = heapq.heappop(heap)
            fn(now, *args)

    def __len__(self):
        return len(self._heap)
