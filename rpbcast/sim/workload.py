"""Workloads: Poisson senders of fixed-size packets (thesis §7.1: "each
sender independently generates 1 kilobyte packets, with Poisson arrival
rates").

    w = Poisson(senders=[3, 7], rate=20.0, size=1024, stop=10.0)
    pub = Publisher(net, w, rng)          # schedules itself on the network
    ...
    pub.published[3], pub.send_times[3]   # seqs published and when

Each sender's arrivals are a Poisson process of rate `rate / burst` bursts
per second; a burst publishes `burst` messages at the same instant (so the
mean message rate is `rate`).  Arrivals stop at `stop` seconds after
`start`, or once a sender has published `count` messages, whichever is
first.  Arrival times are drawn up front from the workload's own seeded
random.Random, one stream per sender in sender order, so they do not depend
on anything the protocol does.

A publish the engine refuses (BlockingIOError: send buffer or FIFO-SRB
window full) is retried every `retry` seconds and counted in `blocked`.
With `backlog=True` the producer instead keeps refused arrivals in a FIFO
backlog (one retry per sender every `retry` seconds, published in arrival
order): the offered input is the arrival process, the accepted input what
the engine took; `offer_times` records each message's arrival (backlog mode only).

`labels="stock"` labels every message with an item of the stock-trading
access pattern (rpbcast.sim.stock.StockWorkload: 875 items, 25/100/750 taking
50/40/10 % of the updates; FIFO-SRB §3.2), drawn per sender from a stream
seeded by (seed, sender); `labels[s]` is the label of each published seq.
"""
from __future__ import annotations

import collections
import random
import struct
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Union


NS = 1_000_000_000
HDR = struct.Struct("<IIQq")      # sender, inc, seq, publish time: the payload's first 24 bytes


def payload(sender: int, inc: int, seq: int, t: int, size: int) -> bytes:
    """The simulator's payloads: a header naming the message, zero padding."""
    h = HDR.pack(sender, inc, seq, t)
    return h + bytes(size - len(h)) if size > len(h) else h[:max(size, 0)]


@dataclass
class Poisson:
    senders: Sequence[int]
    rate: float                              # messages/s per sender
    size: int = 1024                         # payload bytes
    start: float = 0.0                       # seconds after the network start
    stop: Optional[float] = None             # seconds after start; None: until count
    count: Union[None, int, Dict[int, int]] = None   # messages per sender
    burst: int = 1                           # messages per arrival
    retry: float = 0.001
    labels: Optional[str] = None             # None, or "stock": label each message with a stock item
    backlog: bool = False                    # refused arrivals wait in a FIFO backlog (offered vs accepted)

    def __post_init__(self):
        if self.rate <= 0:
            raise ValueError("rate must be > 0 messages/s")
        if self.stop is None and self.count is None:
            raise ValueError("a workload needs a stop time or a message count")
        if self.burst < 1:
            raise ValueError("burst must be >= 1")
        if self.size < 0:
            raise ValueError("size must be >= 0")
        if self.labels not in (None, "stock"):
            raise ValueError(f"labels must be None or 'stock', got {self.labels!r}")

    def count_for(self, s: int) -> Optional[int]:
        if self.count is None:
            return None
        if isinstance(self.count, dict):
            return self.count.get(s, 0)
        return int(self.count)

    def arrivals(self, seed) -> Dict[int, List[tuple]]:
        """{sender: [(offset_ns, messages)]} from the network start."""
        out = {}
        for s in self.senders:
            rng = random.Random(f"workload/{seed}/{s}")
            left = self.count_for(s)
            t = self.start
            bursts_per_s = self.rate / self.burst
            lst = []
            while left is None or left > 0:
                t += rng.expovariate(bursts_per_s)
                if self.stop is not None and t > self.start + self.stop:
                    break
                k = self.burst if left is None else min(self.burst, left)
                lst.append((int(round(t * NS)), k))
                if left is not None:
                    left -= k
            out[s] = lst
        return out

    @classmethod
    def split(cls, senders: Sequence[int], messages: int, rate: float, **kw) -> "Poisson":
        """`messages` in total spread evenly over the senders (the first ones
        get one more when it does not divide)."""
        senders = list(senders)
        q, r = divmod(int(messages), len(senders))
        return cls(senders, rate, count={s: q + (1 if i < r else 0) for i, s in enumerate(senders)}, **kw)


class Publisher:
    """Publishes a workload into the engines of a network."""

    def __init__(self, net, workload: Poisson, seed=0, t0: Optional[int] = None):
        self.net = net
        self.w = workload
        self.t0 = net.now if t0 is None else t0
        self.plan = workload.arrivals(seed)
        self.published: Dict[int, int] = {s: 0 for s in workload.senders}
        self.send_times: Dict[int, List[int]] = {s: [] for s in workload.senders}
        self.inc: Dict[int, int] = {}
        self.blocked = 0
        self.last_arrival = max((self.t0 + p[-1][0] for p in self.plan.values() if p), default=self.t0)
        self.done_at: Optional[int] = None
        self._left = sum(len(p) for p in self.plan.values())
        self.labels: Dict[int, Optional[list]] = {s: None for s in workload.senders}
        if workload.labels == "stock":
            from rpbcast.sim.stock import StockWorkload
            for s in workload.senders:
                n = sum(k for _, k in self.plan[s])
                st = StockWorkload(seed=random.Random(f"labels/{seed}/{s}").getrandbits(64))
                self.labels[s] = st.labels(n).tolist()
        self.backlog = {s: collections.deque() for s in workload.senders} if workload.backlog else None
        self.offer_times: Dict[int, List[int]] = {s: [] for s in workload.senders}
        self._retry_at: Dict[int, Optional[int]] = {s: None for s in workload.senders}
        for s in workload.senders:
            if s not in net.engines:
                raise ValueError(f"sender {s} has no engine")
            self.inc[s] = net.engines[s].inc
            for off, k in self.plan[s]:
                net.at(self.t0 + off, self._fire(s, k), node=s)

    def _fire(self, s, k):
        if self.backlog is not None:
            def arrive():
                self.backlog[s].append([self.net.now, k])
                if self._retry_at[s] is None:
                    self._drain_backlog(s)
            return arrive

        def fire():
            self._publish(s, k)
        return fire

    def _drain_backlog(self, s):
        """Publish sender s's backlog in arrival order until the engine
        refuses; then retry once after `retry` seconds."""
        net = self.net
        e = net.engines[s]
        now = net.now
        self._retry_at[s] = None
        q = self.backlog[s]
        while q:
            item = q[0]
            t_offer, k = item
            while k > 0:
                if not self._publish_one(s, e, now):
                    item[1] = k
                    t = now + int(self.w.retry * NS)
                    self._retry_at[s] = t
                    net.at(t, lambda: self._drain_backlog(s), node=s)
                    return
                self.offer_times[s].append(t_offer)
                k -= 1
            q.popleft()
            self._left -= 1
            if self._left == 0:
                self.done_at = now

    def _publish_one(self, s, e, now) -> bool:
        """Publish sender s's next message now (with its stock label, if
        any); False if the engine refused it (BlockingIOError: counted)."""
        times = self.send_times[s]
        labels = self.labels[s]
        seq = e.node.next_seq if hasattr(e, "node") else self.published[s]
        data = payload(s, self.inc[s], seq, now, self.w.size)
        try:
            if labels is None:
                got = e.publish(data, now=now)
            else:
                got = e.publish(data, label=labels[len(times)], now=now)
        except BlockingIOError:
            self.blocked += 1
            return False
        if got != len(times):
            raise RuntimeError(f"sender {s}: engine gave seq {got}, expected {len(times)}")
        times.append(now)
        self.published[s] += 1
        return True

    def _publish(self, s, k):
        net = self.net
        e = net.engines[s]
        now = net.now
        while k > 0:
            if not self._publish_one(s, e, now):
                net.at(now + int(self.w.retry * NS), self._fire(s, k), node=s)
                return
            k -= 1
        self._left -= 1
        if self._left == 0:
            self.done_at = now

    @property
    def finished(self) -> bool:
        return self._left == 0

    def total(self) -> int:
        return sum(self.published.values())
