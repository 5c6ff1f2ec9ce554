"""Building rpbcast groups on the in-memory network, for tests."""
from __future__ import annotations

import collections

from rpbcast.config import Config
from rpbcast.drivers.memnet import NS, MemNet


class Group:
    """n nodes (ids 1..n), the given senders and loggers, on a MemNet."""

    def __init__(self, n, senders, loggers=(), tmp_path=None, seed=1, loss=0.0, dup=0.0,
                 jitter=0.0002, **cfg):
        self.ids = list(range(1, n + 1))
        self.senders = list(senders)
        self.loggers = list(loggers)
        self.net = MemNet(seed=seed, loss=loss, dup=dup, jitter=jitter)
        self.specs = MemNet.member_specs(self.ids, loggers=self.loggers)
        self.tmp_path = tmp_path
        self.cfg = dict(gossip_interval=0.05, incarnation=1)
        self.cfg.update(cfg)
        self.E = {}
        self.target = {}          # sender -> messages it will have published
        self.got = collections.defaultdict(collections.Counter)   # node -> (sender, inc, seq) -> count
        self.payload_ok = True
        for i in self.ids:
            self.start(i)

    def config(self, i, **over):
        kw = dict(self.cfg)
        kw.update(over)
        role = "logger" if i in self.loggers else "member"
        log_dir = str(self.tmp_path / f"log{i}") if role == "logger" else None
        return Config(node_id=i, members=self.specs, role=role, log_dir=log_dir, **kw)

    def start(self, i, **over):
        self.E[i] = self.net.add(self.config(i, **over))
        return self.E[i]

    def receivers(self):
        return [i for i in self.ids if i not in self.loggers and i in self.E and i not in self.net.down]

    # -- traffic -------------------------------------------------------------
    def publish_stream(self, count, per_tick=5, tick=0.001, start_delay=0.01, senders=None):
        """Each sender publishes `count` messages, per_tick at a time."""
        senders = self.senders if senders is None else senders
        left = {s: count for s in senders}
        for s in senders:
            self.target[s] = self.target.get(s, 0) + count
        net = self.net

        def go(net):
            more = False
            for s in senders:
                e = self.E[s]
                for _ in range(per_tick):
                    if left[s] <= 0:
                        break
                    seq = e.node.next_seq
                    e.publish(payload(s, e.inc, seq), now=net.now)
                    left[s] -= 1
                more |= left[s] > 0
            if more:
                net.at(net.now + int(tick * NS), go)

        net.at(net.now + int(start_delay * NS), go)

    def publish_now(self, count, sender=None):
        """`count` messages from `sender` (the first sender by default) at the
        current virtual time, handed to the network at once."""
        s = self.senders[0] if sender is None else sender
        e = self.E[s]
        for _ in range(count):
            e.publish(payload(s, e.inc, e.node.next_seq), now=self.net.now)
        self.target[s] = self.target.get(s, 0) + count
        self.net.flush(s)

    def drain(self):
        for i in self.receivers():
            for d in self.E[i].recv(now=self.net.now):
                self.got[i][(d.sender, d.inc, d.seq)] += 1
                if d.payload != payload(d.sender, d.inc, d.seq):
                    self.payload_ok = False

    def expected(self, i):
        return {(s, self.E[s].inc, q) for s in self.target if s != i for q in range(self.target[s])}

    def complete(self):
        self.drain()
        if any(self.E[s].node.next_seq < n for s, n in self.target.items()):
            return False
        return all(set(self.got[i]) >= self.expected(i) for i in self.receivers())

    def run_until_complete(self, timeout=30.0):
        return self.net.run_until_true(lambda net: self.complete(), timeout=timeout)

    def duplicates(self):
        return {i: [k for k, v in c.items() if v > 1] for i, c in self.got.items() if any(v > 1 for v in c.values())}

    def extras(self):
        """Deliveries that were never sent."""
        out = {}
        for i, c in self.got.items():
            bad = set(c) - self.expected(i)
            if bad:
                out[i] = bad
        return out

    def total(self, counter, ids=None):
        ids = self.ids if ids is None else ids
        return sum(self.E[i].counters()[counter] for i in ids if i in self.E)


def payload(sender, inc, seq):
    return b"%d/%d/%d" % (sender, inc, seq) + b"." * (seq % 17)
