"""Consumer applications: receivers whose applications read at a limited
rate (a slow consumer) or every `consume_interval` (a fast one), instead of
taking everything at each drain; with `consumer_queue` B their hosts stop
taking datagrams from the network while B messages wait for the
application (the core's bounded delivery queues; docs/simulator.md).
"""
from __future__ import annotations

from typing import Dict

from rpbcast.sim.topology import NS


class Consumers:
    def __init__(self, p: dict, net, tracker, receivers):
        self.net = net
        self.tracker = tracker
        self.rates: Dict[int, float] = {}            # node -> msgs/s (0 = unlimited)
        c = p["consumers"]
        if not c:
            return
        for v, rate in sorted((int(k), float(x)) for k, x in dict(c).items()):
            if v not in receivers:
                raise ValueError(f"consumer {v} is not a receiver")
            if rate < 0:
                raise ValueError("consumer rates must be >= 0 (0 = unlimited)")
            self.rates[v] = rate
            tracker.track_reads(v)
        self.tick_ns = int(round(float(p["consume_interval"]) * NS))
        if self.tick_ns <= 0:
            raise ValueError("consume_interval must be > 0")
        self.limit = p["consumer_queue"]
        self.tokens = {v: 0.0 for v in self.rates}
        for v in self.rates:
            if self.limit is not None:
                net.core.set_rx_limit(v, int(self.limit))
            net.at(net.now + self.tick_ns, self._ticker(v), node=v)

    def _ticker(self, v):
        """v's application, every tick: read what the rate allows, then let
        the host take held datagrams while there is room."""
        rate = self.rates[v]
        per_tick = rate * self.tick_ns / NS
        cap = max(1.0, per_tick)
        core = self.net.core
        limited = self.limit is not None
        take = self.tracker.take
        batch = self.tracker.batch

        def tick():
            now = self.net.now
            if rate > 0:
                # an idle application does not bank capacity beyond one tick
                tok = min(self.tokens[v] + per_tick, cap)
                n = int(tok)
                k = take(v, batch(n), read=True) if n else 0
                self.tokens[v] = tok - k if k == n else tok - int(tok)
            else:
                while take(v, batch(1 << 16), read=True):
                    pass
            if limited:
                core.release(v)
            self.net.at(now + self.tick_ns, tick, node=v)
        return tick

    def queue_summary(self) -> dict:
        """The bounded delivery queues at the end (results: consumer_*)."""
        q = [self.net.core.rx_queue(v) for v in self.rates]
        return {"consumer_waiting": int(sum(x[0] for x in q)), "consumer_held": int(sum(x[1] for x in q)),
                "consumer_held_total": int(sum(x[2] for x in q)), "consumer_held_max": int(max(x[3] for x in q))}
