"""Stateful property test of a small rpbcast group on the unreliable channel
of thesis §2.3 (drops, duplicates, reorders; never invents).

After every step, at every receiver and for every sender it knows:
  Invariant 3.3  nothing is both delivered (or deliverable) and missing;
  Property 3.4   nothing is delivered twice;
  Property 3.5   every seq below lastseen+1 is delivered or missing (drained
                 deliveries: nothing is left pending), exactly one of them;
  Integrity      only what was sent is delivered, byte for byte.
At the end the channel heals and every message must reach every receiver
within a bounded time (liveness).
"""
import collections
import pathlib
import tempfile

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from groups import Group, payload
from rpbcast.core.node import PHASE_ALL

LIVENESS_SECONDS = 30.0


class GroupOnLossyChannel(RuleBasedStateMachine):
    @initialize(seed=st.integers(0, 2**32 - 1), n=st.integers(3, 4),
                with_logger=st.booleans(), gossip=st.sampled_from([0.02, 0.05]))
    def build(self, seed, n, with_logger, gossip):
        self.tmp = tempfile.TemporaryDirectory()
        loggers = [n] if with_logger else []
        senders = [1, 2] if n > 3 else [1]
        self.g = Group(n, senders=senders, loggers=loggers, tmp_path=pathlib.Path(self.tmp.name),
                       seed=seed, gossip_interval=gossip, store_bytes=1 << 20, store_entries=4096,
                       gc_limit=10 if with_logger else 1000)
        self.published = collections.Counter()

    def teardown(self):
        g = getattr(self, "g", None)
        if g is None:
            return
        try:
            g.net.loss, g.net.dup = 0.0, 0.0
            g.net.drop_filter = None
            for s in g.senders:
                g.target[s] = g.E[s].node.next_seq
            assert g.run_until_complete(timeout=LIVENESS_SECONDS), \
                "liveness: not every message reached every receiver after the channel healed"
            self.check()
        finally:
            self.tmp.cleanup()

    @rule(k=st.integers(1, 6), which=st.integers(0, 1))
    def publish(self, k, which):
        g = self.g
        s = g.senders[which % len(g.senders)]
        e = g.E[s]
        for _ in range(k):
            e.publish(payload(s, e.inc, e.node.next_seq), now=g.net.now)
        g.net.flush(s)

    @rule(ms=st.integers(1, 120))
    def advance(self, ms):
        self.g.net.run(ms / 1000)

    @rule(loss=st.sampled_from([0.0, 0.05, 0.2, 0.5]), dup=st.sampled_from([0.0, 0.1, 0.3]),
          jitter_us=st.sampled_from([0, 200, 3000]))
    def weather(self, loss, dup, jitter_us):
        net = self.g.net
        net.loss, net.dup, net.jitter = loss, dup, jitter_us * 1000

    @rule(victim=st.integers(2, 4), ms=st.integers(10, 300))
    def partition(self, victim, ms):
        """Cut one node off for a while (both directions)."""
        g = self.g
        if victim not in g.E:
            return
        until = g.net.now + ms * 1_000_000
        g.net.drop_filter = lambda src, dst, data: g.net.now < until and victim in (src, dst)

    @invariant()
    def safety(self):
        if hasattr(self, "g"):
            self.check()

    def check(self):
        g = self.g
        g.drain()
        for i in g.receivers():
            node = g.E[i].node
            got = g.got[i]
            dups = [k for k, v in got.items() if v > 1]
            assert not dups, f"Property 3.4: node {i} delivered {dups[:3]} more than once"
            assert g.payload_ok, "Integrity: a payload differs from what was sent"
            by_sender = collections.defaultdict(set)
            for (s, inc, q) in got:
                by_sender[(s, inc)].add(q)
                assert s in g.E and q < g.E[s].node.next_seq, f"Integrity: {(s, inc, q)} was never sent"
            assert node.pending == 0 or g.E[i].cfg.delivery == "fifo"
            for slot, s, inc in node.peer_ids():
                nxt = node.peer_next(slot)
                base = node.peer_info(slot)["base"]
                missing = set()
                for lo, hi in node.missing(slot, PHASE_ALL):
                    missing.update(range(int(lo), int(hi) + 1))
                delivered = by_sender.get((s, inc), set())
                both = delivered & missing
                assert not both, f"Invariant 3.3: node {i} has {sorted(both)[:3]} of {s} delivered and missing"
                for q in range(base, nxt):
                    assert (q in delivered) != (q in missing), (
                        f"Property 3.5: node {i}, sender {s}, seq {q} is "
                        f"{'both' if q in delivered else 'neither'} delivered and missing (lastseen {nxt - 1})")


GroupOnLossyChannel.TestCase.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)
TestGroupOnLossyChannel = GroupOnLossyChannel.TestCase
