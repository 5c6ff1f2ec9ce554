"""An in-memory network that drives engines: the unreliable channel of thesis
§2.3 (it may drop, duplicate and reorder, never invent), on a virtual clock.

    net = MemNet(seed=1, loss=0.05)
    a = net.add(Config(node_id=1, ...))
    net.run(seconds=1.0)

Deterministic for a seed.  Every node is driven only through the engine's
sans-IO interface (receive_datagram / handle_timer / datagrams_to_send), the
same one the UDP transport and the simulator use.
"""
from __future__ import annotations

import heapq
import random
from typing import Callable, Dict, List, Optional

from rpbcast.config import Config, MemberSpec
from rpbcast.protocol.engine import Engine
from rpbcast.core.node import DEST_MCAST

NS = 1_000_000_000
EV_DGRAM = 0
EV_TIMER = 1
EV_CALL = 2


class MemNet:
    def __init__(self, seed: int = 0, latency: float = 0.0005, jitter: float = 0.0002,
                 loss: float = 0.0, dup: float = 0.0, start: int = NS):
        self.rng = random.Random(seed)
        self.now = start
        self.latency = int(latency * NS)
        self.jitter = int(jitter * NS)
        self.loss = loss
        self.dup = dup
        self.engines: Dict[int, Engine] = {}       # addr -> engine
        self.down = set()                          # addrs of crashed nodes
        self._heap: List = []
        self._seq = 0
        self._timer_at: Dict[int, int] = {}
        self.drop_filter: Optional[Callable] = None   # (src, dst, data) -> True to drop
        self.sent = 0
        self.dropped = 0

    # -- building ----------------------------------------------------------
    @staticmethod
    def member_specs(ids, loggers=()):
        return [MemberSpec(i, i, "logger" if i in loggers else "member") for i in ids]

    def add(self, config: Config, log=None, factory=None) -> Engine:
        """Add a node.  factory(config, now, rng, log) builds another engine
        with the same interface (a baseline protocol); default Engine."""
        addr = config.addr or config.node_id
        config = config.replace(addr=addr)
        make = factory or (lambda c, now, rng, log: Engine(c, now, rng, log=log))
        e = make(config, self.now, random.Random(self.rng.getrandbits(64)), log)
        self.engines[addr] = e
        self.down.discard(addr)
        self._arm(addr)
        return e

    def crash(self, addr: int):
        """The node stops: no more events reach it."""
        self.down.add(addr)
        self._timer_at.pop(addr, None)

    # -- events ------------------------------------------------------------
    def _push(self, t, kind, a, b=None):
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, a, b))

    def at(self, t: int, fn: Callable):
        """Call fn(net) at virtual time t."""
        self._push(t, EV_CALL, fn)

    def _arm(self, addr):
        if addr in self.down:
            return
        t = max(self.engines[addr].get_timer(), self.now)   # a timer in the past fires now
        cur = self._timer_at.get(addr)
        if cur is None or t < cur:
            self._timer_at[addr] = t
            self._push(t, EV_TIMER, addr)

    def _delay(self):
        return self.latency + (self.rng.randrange(self.jitter) if self.jitter else 0)

    def _lose(self, src, dst, data):
        if self.drop_filter is not None and self.drop_filter(src, dst, data):
            return True
        return self.loss > 0 and self.rng.random() < self.loss

    def flush(self, addr):
        """Move what an engine wants sent into the network."""
        e = self.engines[addr]
        for dest, data in e.datagrams_to_send():
            targets = [a for a in self.engines if a != addr] if dest == DEST_MCAST else [dest]
            for d in targets:
                self.sent += 1
                if self._lose(addr, d, data):
                    self.dropped += 1
                    continue
                copies = 2 if (self.dup and self.rng.random() < self.dup) else 1
                for _ in range(copies):
                    self._push(self.now + self._delay(), EV_DGRAM, d, (addr, data))
        self._arm(addr)

    def step(self) -> bool:
        if not self._heap:
            return False
        t, _, kind, a, b = heapq.heappop(self._heap)
        self.now = max(self.now, t)
        if kind == EV_CALL:
            a(self)
            for addr in list(self.engines):
                if addr not in self.down:
                    self.flush(addr)
            return True
        if a in self.down or a not in self.engines:
            return True
        e = self.engines[a]
        if kind == EV_TIMER:
            if self._timer_at.get(a) != t:
                return True            # superseded
            del self._timer_at[a]
            e.handle_timer(self.now)
        else:
            src, data = b
            e.receive_datagram(data, src, self.now)
        self.flush(a)
        return True

    def run_until(self, t: int):
        while self._heap and self._heap[0][0] <= t:
            self.step()
        self.now = max(self.now, t)

    def run(self, seconds: float):
        self.run_until(self.now + int(seconds * NS))

    def run_until_true(self, cond: Callable[["MemNet"], bool], timeout: float, check_every: float = 0.01):
        """Run until cond(net) holds (checked every check_every seconds of
        virtual time) or timeout; returns whether it held."""
        end = self.now + int(timeout * NS)
        while self.now < end:
            if cond(self):
                return True
            self.run_until(min(end, self.now + int(check_every * NS)))
        return cond(self)
