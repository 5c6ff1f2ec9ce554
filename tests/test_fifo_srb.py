"""FIFO Semantically Reliable Broadcast (Pereira, Rodrigues, Oliveira) on
rpbcast, in the in-memory channel.

Obsolescence: m ⊏ m' iff both come from the same sender with the same label
and m was broadcast first; unlabelled messages are never obsolete.

The stateful test checks the five properties of §2.1 with up to f crashes;
then one test per mechanism (TP4, TP5, window inference, WINDOW, PURGED,
conflation); then the two counter-examples of §2.2 as concrete executions,
each run once with a naive variant (which must fail) and once with the real
extension (which must not).
"""
import collections

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from groups import Group, payload
from rpbcast.core import wire
from rpbcast.drivers.memnet import NS
from rpbcast.core.node import SELF_SLOT

T = wire.MsgType
LABELS = [None, 0, 1, 2]            # a small label space: obsolescence is frequent
LIVENESS_SECONDS = 10.0


# ---------------------------------------------------------------------------
# The §2.1 properties on a finite run

class Run:
    """What was broadcast and delivered in a group, and the §2.1 checks.

    Messages are (sender, seq); the group uses one incarnation per node.
    "There is a time after which no process broadcasts m'' ⊐ m" holds for
    every message of a finite run, so each liveness property asks for *some*
    m' ⊒ m: m itself, or a later message of its sender with its label.  A
    message obsoleted by a later broadcast may thus be skipped; the last one
    of its label (or an unlabelled one) never may."""

    def __init__(self, g):
        self.g = g
        self.B = collections.defaultdict(list)      # sender -> [(seq, label)] in broadcast order
        self.label = {}                              # (sender, seq) -> label
        self.D = collections.defaultdict(list)      # node -> [(sender, seq)] in delivery order
        self.Dset = collections.defaultdict(set)
        self.crashed = set()
        # per (sender, label): sorted seqs broadcast with it, to answer ⊒ quickly
        self._by_label = collections.defaultdict(list)

    # -- recording -------------------------------------------------------------
    def publish(self, s, label):
        """Broadcast at s; False when the FIFO-SRB window is closed."""
        e = self.g.E[s]
        seq = e.node.next_seq
        try:
            got = e.publish(payload(s, e.inc, seq), label=label, now=self.g.net.now)
        except BlockingIOError:
            return False
        assert got == seq
        self.B[s].append((seq, label))
        self.label[(s, seq)] = label
        if label is not None:
            self._by_label[(s, label)].append(seq)
        return True

    def consume(self, i, max_n=1 << 16):
        if i in self.crashed:
            return 0
        e = self.g.E[i]
        out = e.recv(max_n=max_n, now=self.g.net.now)
        for d in out:
            m = (d.sender, d.seq)
            # Integrity, byte for byte (checked on the fly; the rest in check_safety)
            assert d.inc == self.g.E[d.sender].inc and m in self.label, \
                f"Integrity: node {i} delivered {m}, which was never broadcast"
            assert d.label == self.label[m], f"Integrity: {m} delivered at {i} with label {d.label}"
            assert d.payload == payload(d.sender, d.inc, d.seq), f"Integrity: payload of {m} differs at {i}"
            self.D[i].append(m)
            self.Dset[i].add(m)
        return len(out)

    def crash(self, i):
        self.g.net.crash(i)
        self.crashed.add(i)

    def correct(self):
        """Processes that did not crash and deliver to an application
        (loggers hold and serve messages but deliver nothing)."""
        return [i for i in self.g.ids if i not in self.crashed and i not in self.g.loggers]

    # -- relation ----------------------------------------------------------------
    def covered(self, i, m):
        """Did i deliver some m' ⊒ m?"""
        if m in self.Dset[i]:
            return True
        s, q = m
        lab = self.label[m]
        if lab is None:
            return False
        return any(x > q and (s, x) in self.Dset[i] for x in self._by_label[(s, lab)])

    # -- safety: after every step ----------------------------------------------
    def check_safety(self):
        for i, ds in self.D.items():
            # Integrity: at most once
            assert len(ds) == len(self.Dset[i]), \
                f"Integrity: node {i} delivered {[m for m, c in collections.Counter(ds).items() if c > 1][:3]} twice"
            # FIFO Order: m broadcast before m' (same sender) is never delivered after m'
            last = {}
            for s, q in ds:
                assert q > last.get(s, -1), \
                    f"FIFO Order: node {i} delivered {(s, q)} after {(s, last[s])}"
                last[s] = q

    # -- liveness: at the end -------------------------------------------------------
    def violations(self):
        """[(property, text)] of Validity, Agreement and FIFO Completeness
        violations on the run so far (deliveries of correct processes)."""
        out = []
        correct = self.correct()
        # Validity: a correct broadcaster delivers some m' ⊒ m of each of its m.
        for s in correct:
            for q, _ in self.B[s]:
                if not self.covered(s, (s, q)):
                    out.append(("Validity", f"correct sender {s} never delivered any m' ⊒ {(s, q)}"))
        # Agreement: m delivered by a correct process -> every correct process
        # delivers some m' ⊒ m (messages of crashed senders included).
        delivered = set()
        for i in correct:
            delivered |= self.Dset[i]
        for m in sorted(delivered):
            for j in correct:
                if not self.covered(j, m):
                    out.append(("Agreement", f"{m} delivered by a correct process, node {j} has no m' ⊒ it"))
        # FIFO Completeness: a correct process that delivered m' delivers
        # some m'' ⊒ m of every m its sender broadcast before m'.
        for i in correct:
            top = {}
            for s, q in self.D[i]:
                top[s] = max(top.get(s, -1), q)
            for s, hi in top.items():
                for q, _ in self.B[s]:
                    if q >= hi:
                        break
                    if not self.covered(i, (s, q)):
                        out.append(("FIFO Completeness",
                                    f"node {i} delivered {(s, hi)} but no m'' ⊒ {(s, q)}"))
        return out

    def drain_correct(self):
        for i in self.correct():
            self.consume(i)


def srb_group(n, senders, seed=1, f=1, w=8, loss=0.0, **cfg):
    # gc_limit: the gossip buffer plays the paper's outgoing buffers O_ij,
    # which only purging (or stability) empties; with no logger here it must
    # not age messages out during a test.
    kw = dict(delivery="fifo", deliver_own=True, srb_window=w, srb_f=f, gossip_interval=0.02,
              gc_limit=100_000, srb_report_interval=0.01, member_timeout=2.0)
    kw.update(cfg)
    return Group(n, senders=senders, seed=seed, loss=loss, **kw)


# ---------------------------------------------------------------------------
# Stateful test: the five properties under loss, duplication, reordering,
# partitions, slow consumers and up to f crashes (senders included)

class FifoSrbGroup(RuleBasedStateMachine):
    """3-5 members, one or two senders with deliver_own (so a sender is
    also a receiver of its own stream, as in §2.3), w in 4..32, f = 1 or 2.
    Rules: publishes and paced bursts over a label space of three items plus
    unlabelled messages; loss (up to 60%), duplication, reordering (jitter);
    partitions; disconnect/reconnect; applications that consume one, three
    or all waiting messages at a time (so queues back up and TP4 works);
    and crashes of up to f members, senders included.

    After every step (Run.check_safety, and on every recv): Integrity (each
    delivery was broadcast, with its label and payload, and is delivered at
    most once per process) and FIFO Order (per process and sender,
    delivered seqs strictly increase).  At the end the channel heals and the
    group runs until Validity, Agreement and FIFO Completeness (Run.violations)
    hold, within LIVENESS_SECONDS of virtual time; then they are asserted."""

    @initialize(seed=st.integers(0, 2**32 - 1), n=st.integers(3, 5), f=st.integers(1, 2),
                w=st.sampled_from([4, 8, 16, 32]), two_senders=st.booleans())
    def build(self, seed, n, f, w, two_senders):
        f = min(f, n - 2)                        # at least two correct processes
        self.f = f
        senders = [1, 2] if two_senders else [1]
        self.g = srb_group(n, senders, seed=seed, f=f, w=w)
        self.run = Run(self.g)
        self.cuts = []                           # (node, until): its traffic is dropped
        self.disconnected = set()
        net = self.g.net
        self.g.net.drop_filter = lambda src, dst, data: any(
            net.now < until and v in (src, dst) for v, until in self.cuts)

    def teardown(self):
        if not hasattr(self, "run"):
            return
        g, run = self.g, self.run
        g.net.loss, g.net.dup = 0.0, 0.0
        self.cuts = []
        for i in list(self.disconnected):
            self._reconnect(i)

        def done(net):
            run.drain_correct()
            return not run.violations()

        g.net.run_until_true(done, timeout=LIVENESS_SECONDS, check_every=0.05)
        run.drain_correct()
        run.check_safety()
        bad = run.violations()
        assert not bad, f"{len(bad)} violations after healing, e.g. {bad[:4]}"

    @rule(which=st.integers(0, 1), labels=st.lists(st.sampled_from(LABELS), min_size=1, max_size=8))
    def publish(self, which, labels):
        s = self.g.senders[which % len(self.g.senders)]
        if s in self.run.crashed:
            return
        for lab in labels:
            if not self.run.publish(s, lab):
                break                                # window closed: back-pressure
        self.g.net.flush(s)

    @rule(which=st.integers(0, 1), k=st.integers(5, 60), gap_ms=st.integers(0, 3),
          labels=st.sampled_from([(0,), (0, 1), (0, 1, 2, None), (0, 0, 0, None)]))
    def stream(self, which, k, gap_ms, labels):
        """A burst paced at gap_ms, waiting (up to 50 ms) whenever the window
        is closed: the window, TP5 and purge signalling at work."""
        g = self.g
        s = g.senders[which % len(g.senders)]
        rng = g.net.rng
        waited = 0
        while k > 0 and s not in self.run.crashed and waited < 50:
            if self.run.publish(s, labels[rng.randrange(len(labels))]):
                k -= 1
                g.net.flush(s)
                g.net.run(gap_ms / 1000)
            else:
                waited += 1
                g.net.run(0.001)

    @rule(ms=st.integers(1, 150))
    def advance(self, ms):
        self.g.net.run(ms / 1000)

    @rule(node=st.integers(1, 5), k=st.sampled_from([1, 3, 1 << 16]))
    def consume(self, node, k):
        """Applications consume at their own pace: the others' queues fill
        and TP4 purges them."""
        if node in self.g.E:
            self.run.consume(node, k)

    @rule(loss=st.sampled_from([0.0, 0.1, 0.3, 0.6]), dup=st.sampled_from([0.0, 0.2]),
          jitter_us=st.sampled_from([0, 200, 5000]))
    def weather(self, loss, dup, jitter_us):
        net = self.g.net
        net.loss, net.dup, net.jitter = loss, dup, jitter_us * 1000

    @rule(victim=st.integers(1, 5), ms=st.integers(10, 400))
    def partition(self, victim, ms):
        """Cut one node off for a while (both directions)."""
        self.cuts.append((victim, self.g.net.now + ms * 1_000_000))

    @rule(victim=st.integers(1, 5), ms=st.integers(10, 400))
    def disconnect(self, victim, ms):
        """An intermittently connected member goes away (Engine.disconnect)
        and comes back: a correct process, so everything applies to it."""
        g = self.g
        if victim not in g.E or victim in self.run.crashed or victim in self.disconnected:
            return
        g.E[victim].disconnect(g.net.now)
        g.net.flush(victim)
        self.disconnected.add(victim)
        until = g.net.now + ms * 1_000_000
        self.cuts.append((victim, until))
        g.net.at(until, lambda net: self._reconnect(victim))

    def _reconnect(self, i):
        if i in self.disconnected:
            self.disconnected.discard(i)
            if i not in self.run.crashed:
                self.g.E[i].reconnect(self.g.net.now)
                self.g.net.flush(i)

    @precondition(lambda self: len(self.run.crashed) < self.f)
    @rule(victim=st.integers(1, 5))
    def crash(self, victim):
        if victim in self.g.E and victim not in self.run.crashed:
            self.run.crash(victim)

    @invariant()
    def safety(self):
        if hasattr(self, "run"):
            self.run.check_safety()


FifoSrbGroup.TestCase.settings = settings(max_examples=400, stateful_step_count=40, deadline=None)
TestFifoSrbGroup = FifoSrbGroup.TestCase


# ---------------------------------------------------------------------------
# Helpers for the scenario tests

def msgs_of(data):
    return wire.parse(data)[1]


def is_copy(m, sender, seqs):
    """A DATA or REPAIR of one of seqs of sender."""
    return m.type in (T.DATA, T.REPAIR) and m.sender == sender and m.seq in seqs


def publish_one(run, s, label):
    """One message in its own datagram (so drop filters can single it out)."""
    assert run.publish(s, label)
    run.g.net.flush(s)
    run.g.net.run(0.0005)


def latest_per_label(run, s):
    last = {}
    for q, lab in run.B[s]:
        if lab is not None:
            last[lab] = q
    return last


# ---------------------------------------------------------------------------
# TP4: purging in the delivery queue

def test_tp4_slow_consumer_queue_stays_bounded_and_never_rolls_back():
    """Node 3's application consumes nothing while 3000 updates of 8 items go
    by.  TP4 keeps one queued value per item there, so its store stays small
    and its receive frontier keeps moving: the sender's window never closes
    because of it.  The same run with reliable FIFO delivery (no window, no
    labels) holds all 3000.
    When node 3 finally reads, values come in FIFO order (never an older
    value of an item after a newer one) and end at the sender's last value
    of every item."""
    def run_with(w):
        g = srb_group(3, [1], w=w) if w else Group(3, senders=[1], delivery="fifo",
                                                  gossip_interval=0.02, gc_limit=10)
        run = Run(g)
        rng = g.net.rng
        held, blocked = 0, 0
        for k in range(3000):
            if not run.publish(1, rng.randrange(8) if w else None):
                blocked += 1
            if k % 10 == 9:
                g.net.flush(1)
                g.net.run(0.002)
                run.consume(2)                        # a fast consumer
                held = max(held, g.E[3].counters()["store_entries"])
        g.net.run(0.5)
        return g, run, held, blocked

    g, run, held, blocked = run_with(w=64)
    _, _, held_reliable, _ = run_with(w=0)
    assert blocked == 0, "the slow consumer closed the sender's window"
    assert held_reliable >= 2900, held_reliable
    assert held <= 150, f"slow consumer held {held} messages with TP4 (reliable: {held_reliable})"
    assert g.E[3].node.peer_contiguous(g.E[3].node.find_peer(1, 1)) == g.E[1].node.next_seq
    run.drain_correct()
    run.check_safety()                                # FIFO Order at node 3 (and 2)
    seen = {}
    for s, q in run.D[3]:
        lab = run.label[(s, q)]
        assert q > seen.get(lab, -1)
        seen[lab] = q
    assert seen == latest_per_label(run, 1)
    assert len(run.D[3]) < 100 and g.E[3].counters()["purged"] > 2900
    assert not run.violations()


def test_tp4_waits_for_the_deliverable_prefix():
    """Regression (FIFO Completeness).  The queue used to purge a queued
    value as soon as a newer one of its item arrived, even beyond a gap.  p
    sends m0 (item A), m1, m2, m3 (lost everywhere), m4 (item A) and
    crashes: m3 reached nobody, so nobody can deliver m4 -- and m0 had been
    purged for it, so receivers delivered m1, m2 and never any m'' ⊒ m0.
    TP4 must only use a newer value in the deliverable prefix (the paper's
    Q_i is a prefix: enqueue needs next(m, Q_i))."""
    g = srb_group(4, [1], w=8)
    run = Run(g)
    for lab in (7, None, None):
        publish_one(run, 1, lab)
    g.net.run(0.1)
    g.net.drop_filter = lambda src, dst, data: any(is_copy(m, 1, {3}) for m in msgs_of(data))
    publish_one(run, 1, None)                         # m3: reaches nobody
    publish_one(run, 1, 7)                            # m4
    g.net.run(0.002)
    run.crash(1)
    g.net.run(2.0)
    run.drain_correct()
    assert not run.violations(), run.violations()
    for i in (2, 3, 4):
        assert run.D[i] == [(1, 0), (1, 1), (1, 2)]


# ---------------------------------------------------------------------------
# TP5: purging in retransmission buffers only once the successor is safe

def test_tp5_sender_purges_only_once_the_successor_is_safe():
    """f = 2: a message is safe when more than 2 members hold it.  With no
    receive frontier reaching the sender nothing is safe and nothing leaves
    its buffer, so obsolete messages fill the window; with node 2's reports
    (2 holders: the sender and node 2) still nothing; with node 3's too
    every obsolete message goes, with a record of what superseded it, and
    its slot is free for s + w."""
    w = 16
    g = srb_group(4, [1], f=2, w=w)
    run = Run(g)
    heard = set()                                     # receivers whose gossip reaches the sender
    g.net.drop_filter = lambda src, dst, data: (dst == 1 and src not in heard
                                                and any(m.type == T.GOSSIP for m in msgs_of(data)))
    sender = g.E[1]
    for k in range(12):
        publish_one(run, 1, k % 2)                    # two items: 0..9 become obsolete
    for _ in range(4):
        publish_one(run, 1, None)
    assert not run.publish(1, None), "the window of 16 should be full"

    def purged():
        return {s: sender.node.srb_purged_by(1, sender.inc, s) for s in range(16)
                if sender.node.srb_purged_by(1, sender.inc, s) is not None}

    g.net.run(0.3)
    assert sender.counters()["purged_buffer"] == 0 and not purged()
    assert sender.node.srb_state[2] == 0                               # safe frontier
    heard.add(2)
    g.net.run(0.3)
    assert sender.counters()["purged_buffer"] == 0 and not purged(), "purged with only f holders"
    assert not run.publish(1, None)
    heard.add(3)
    g.net.run(0.3)
    assert purged() == {s: s + 2 for s in range(10)}                   # superseded by the next value
    assert sender.counters()["purged_buffer"] == 10
    low, nxt, safe, stable = sender.node.srb_state
    assert safe == 16 and stable == 0 and low == 10                    # node 4 unheard: nothing stable
    for _ in range(w - (nxt - low)):
        assert run.publish(1, None), "a purged message's slot must be free for s + w"
    assert not run.publish(1, None)
    # receivers purge their gossip buffers too (TP5 at every process)
    assert all(g.E[i].counters()["purged_buffer"] >= 10 for i in (2, 3, 4))
    g.net.drop_filter = None
    g.net.run(0.5)
    run.drain_correct()
    assert not run.violations()


# ---------------------------------------------------------------------------
# Purge signalling (§2.5): window inference, WINDOW, PURGED

def cut_off_from_seq0(node, drop_window=True, drop_purged=True):
    """Node never gets seq 0 of sender 1 (neither DATA nor REPAIR), nor the
    purge signals chosen."""
    kinds = ({T.WINDOW} if drop_window else set()) | ({T.PURGED} if drop_purged else set())

    def f(src, dst, data):
        return dst == node and any(is_copy(m, 1, {0}) or m.type in kinds for m in msgs_of(data))
    return f


def test_window_inference_receiver_sees_s_plus_w_without_s():
    """w = 4.  Node 3 never gets m0 (item A), nor any PURGED or WINDOW.  Once
    m1 (item A) is safe, m0 is purged at the sender and its slot is free, so
    m4 = m0 + w can go out; node 3, seeing seq 4 without seq 0, concludes 0
    was purged and delivery moves on."""
    w = 4
    g = srb_group(3, [1], w=w)
    run = Run(g)
    g.net.drop_filter = cut_off_from_seq0(3)
    for lab in (5, 5, None, None):
        publish_one(run, 1, lab)
    g.net.run(0.3)
    run.consume(3)
    assert run.D[3] == [], "FIFO: nothing after seq 0 before node 3 knows it was purged"
    assert g.E[1].node.srb_purged_by(1, 1, 0) == 1
    publish_one(run, 1, None)                         # seq 4 = 0 + w
    g.net.run(0.05)
    run.consume(3)
    assert run.D[3] == [(1, 1), (1, 2), (1, 3), (1, 4)]
    assert g.E[3].counters()["forgotten"] == 1
    assert "purged" not in g.E[3].traffic() and "window" not in g.E[3].traffic()
    run.drain_correct()
    assert not run.violations()


@pytest.mark.parametrize("window_notice", [True, False])
def test_window_notice_when_idle(window_notice):
    """w = 64 (no inference from 3 messages).  Node 3 misses m0 (item A,
    purged once m1 is safe) and gets no PURGED answer.  The sender then goes
    idle: its WINDOW(low = 1) notice tells node 3 that seq 0 left the window
    unseen, so it was purged.  Without the notice node 3 waits forever."""
    g = srb_group(3, [1], w=64)
    run = Run(g)
    g.net.drop_filter = cut_off_from_seq0(3, drop_window=not window_notice)
    for lab in (5, 5, None):
        publish_one(run, 1, lab)
    g.net.run(1.0)
    run.drain_correct()
    if window_notice:
        assert g.E[3].traffic()["window"][0] >= 1
        assert run.D[3] == [(1, 1), (1, 2)]
        assert not run.violations()
    else:
        assert run.D[3] == []
        assert ("Agreement", "(1, 1) delivered by a correct process, node 3 has no m' ⊒ it") in run.violations()


def test_purged_answer_not_gcnote():
    """Node 3 misses m0 (item A) and asks for it only after m1 made it
    obsolete and safe: the sender (and node 2, which purged it from its
    gossip buffer too) answer "purged, superseded by 1" -- a PURGED, not a
    GcNOTE -- and node 3 moves on.  (WINDOW notices to node 3 are dropped:
    only the answers can tell it.)"""
    g = srb_group(3, [1], w=64)
    run = Run(g)
    t_ask = g.net.now + int(0.3 * NS)
    answers = []

    def f(src, dst, data):
        msgs = msgs_of(data)
        if dst == 3:
            for m in msgs:
                if m.type == T.PURGED:
                    answers.append((src, [tuple(int.from_bytes(m.body[o:o + 8], "little") for o in (k, k + 8))
                                          for k in range(0, len(m.body), 16)]))
        if dst == 3 and any((m.type == T.DATA and m.seq == 0) or m.type == T.WINDOW for m in msgs):
            return True                               # m0 never arrives as DATA
        return src == 3 and g.net.now < t_ask and any(m.type == T.GOSSIP for m in msgs)

    g.net.drop_filter = f
    for lab in (5, 5, None):
        publish_one(run, 1, lab)
    g.net.run(0.2)
    run.consume(1)              # (a copy still held for the sender's own application would be served)
    assert g.E[1].node.srb_purged_by(1, 1, 0) == 1          # the sender's record
    assert g.E[2].node.srb_purged_by(1, 1, 0) == 1          # node 2's record (TP5 there)
    run.consume(3)
    assert run.D[3] == []
    g.net.run(0.3)
    run.drain_correct()
    assert run.D[3] == [(1, 1), (1, 2)]
    assert answers and all(pairs == [(0, 1)] for _, pairs in answers)
    assert "gcnote" not in g.E[3].traffic()
    assert g.E[1].counters()["purged_notices"] + g.E[2].counters()["purged_notices"] >= 1
    assert not run.violations()


# ---------------------------------------------------------------------------
# Conflation: the latest value per label

def test_conflation_latest_value_per_label_never_rolls_back():
    """Nodes 2 (conflate 1: table and deliveries) and 3 (conflate 2: labelled
    values only in the table) under loss and reordering: the latest value of
    each label never goes back to an older seq, and ends equal to the
    sender's last value of that label.  Unlabelled messages still arrive in
    FIFO order through recv() at node 3."""
    g = srb_group(3, [1], w=32, loss=0.2, jitter=0.004)
    g.E[2].node.set_conflate(1)
    g.E[3].node.set_conflate(2)
    run = Run(g)
    rng = g.net.rng
    seen = {2: {}, 3: {}}
    for k in range(600):
        run.publish(1, rng.choice([0, 1, 2, 3, 4, 5, None]))
        g.net.flush(1)
        g.net.run(0.0003)
        if k % 25 == 0:
            run.consume(2)
        for i in (2, 3):
            for (s, lab), (inc, seq, body) in g.E[i].node.snapshot().items():
                assert seq >= seen[i].get(lab, -1), f"node {i}: latest of {lab} went back"
                seen[i][lab] = seq
                assert body == payload(s, inc, seq)
    g.net.loss = 0.0
    g.net.run(1.0)
    want = latest_per_label(run, 1)
    for i in (2, 3):
        node = g.E[i].node
        snap = node.snapshot()
        assert {lab: v[1] for (s, lab), v in snap.items()} == want
        for lab, q in want.items():
            assert node.latest(lab, sender=1)[:3] == (1, 1, q)
            assert node.latest(lab)[2] == q
    run.drain_correct()
    assert all(run.label[m] is None for m in run.D[3])
    assert run.D[3] == [(1, q) for q, lab in run.B[1] if lab is None]
    # node 2 also delivers: the §2.1 properties hold for it (node 3's
    # application reads labelled values from the table instead)
    assert not [v for v in run.violations() if "node 3" not in v[1]]
    with pytest.raises(ValueError):
        g.E[1].node.latest(0)                          # conflation off at the sender


def test_conflation_late_older_repair_does_not_roll_back():
    """Node 2 misses m0 (item A) and gets m1 (item A) first; m0 then arrives
    as a repair (the sender still holds it: node 3's reports are blocked so
    m1 is not safe).  The table keeps m1; delivery skips m0 (TP4)."""
    g = srb_group(3, [1], w=32)
    g.E[2].node.set_conflate(1)
    run = Run(g)

    def f(src, dst, data):
        msgs = msgs_of(data)
        return ((dst == 2 and any(m.type == T.DATA and m.seq == 0 for m in msgs))
                or (src == 3 and dst == 1 and any(m.type == T.GOSSIP for m in msgs)))

    g.net.drop_filter = f
    publish_one(run, 1, 9)
    publish_one(run, 1, 9)
    g.net.run(0.0008)
    assert g.E[2].node.latest(9)[2] == 1 and g.E[2].counters()["rx_fill"] == 0
    g.net.run(0.2)
    assert g.E[2].counters()["repairs_peer"] + g.E[2].counters()["rx_fill"] >= 1   # m0 did arrive
    assert g.E[2].node.latest(9)[2] == 1
    run.consume(2)
    assert run.D[2] == [(1, 1)]


# ---------------------------------------------------------------------------
# Regressions found by the stateful test

def test_fifo_delivers_own_messages():
    """Validity needs the broadcaster to deliver its own messages: with
    delivery='fifo' (always the case under FIFO-SRB) deliver_own delivered
    nothing and pinned every own message in the store, so the sender stopped
    after store_entries messages."""
    g = Group(3, senders=[1], delivery="fifo", deliver_own=True, gossip_interval=0.02,
              store_entries=1024, gc_limit=2)
    e = g.E[1]
    got = []
    for k in range(3000):
        e.publish(payload(1, 1, k), label=k % 3, now=g.net.now)
        g.net.run(0.0005)
        got += [d.seq for d in e.recv(now=g.net.now)]
    assert got == list(range(3000))


def test_agreement_for_a_crashed_senders_last_message():
    """Node 2 is cut off while the sender sends its last message; node 3
    gets it and delivers it; the sender crashes.  Node 2 never hears of that
    seq from the sender, so it must learn it from node 3's receive
    frontiers (LASTSEEN) and pull it."""
    g = srb_group(3, [1], w=8)
    run = Run(g)
    publish_one(run, 1, None)
    g.net.run(0.1)
    g.net.drop_filter = lambda src, dst, data: 2 in (src, dst)
    publish_one(run, 1, 4)
    g.net.run(0.002)
    run.crash(1)
    g.net.run(0.01)
    g.net.drop_filter = None
    g.net.run(2.0)
    run.drain_correct()
    assert (1, 1) in run.Dset[3] and (1, 1) in run.Dset[2]
    assert not run.violations()


# ---------------------------------------------------------------------------
# The counter-examples of §2.2, as concrete executions.  Each scenario runs
# twice with the same seed: with the naive approach (which must violate
# FIFO-SRB) and with rpbcast's (which must not).

def naive_purge(e):
    """The naive rule of §2.2: delete from the buffers every message made
    obsolete by one that exists, without waiting for it to be safe --
    safe := next, bypassing the extension's (f+1)-th-highest-frontier rule."""
    return e.node.srb_safe(SELF_SLOT, e.node.next_seq)


def purging_before_safety(naive, seed=3):
    """§2.2, second scenario.  p = 1 broadcasts m1 (item A), m2, m3 (item
    A); the first transmissions of m1 and m3 are lost everywhere and m3 never
    leaves p at all (every copy of it is lost: only p holds it).  q = 2
    gets m2, asks for m1, delivers m1 (if it gets it) and m2; then p
    crashes.  Returns the run.  No tail probe: it would show the loss of
    m1 before m3 exists and m1 would be repaired before any purge."""
    g = srb_group(3, [1], seed=seed, f=1, w=8, tail_probe=0)
    run = Run(g)
    g.net.drop_filter = lambda src, dst, data: any(
        (m.type == T.DATA and m.sender == 1 and m.seq == 0) or is_copy(m, 1, {2}) for m in msgs_of(data))
    publish_one(run, 1, 7)                            # m1, seq 0
    publish_one(run, 1, None)                         # m2, seq 1
    publish_one(run, 1, 7)                            # m3, seq 2: m1 ⊏ m3
    run.consume(1)                  # p's own application (a copy it holds for it would be served)
    if naive:
        # p purges m1 because of m3 although m3 is held by p alone (not
        # safe: f = 1 needs 2 holders), and tells whoever asks for m1
        # ("purged, superseded by 2") -- it informs the others.
        assert naive_purge(g.E[1]) == 1
    assert g.net.run_until_true(lambda net: run.consume(2) or (1, 1) in run.Dset[2], timeout=1.0)
    run.crash(1)                                      # p crashes: m3 is gone with it
    g.net.drop_filter = None
    g.net.run(3.0)
    run.drain_correct()
    return run


@pytest.mark.parametrize("naive", [True, False])
def test_counterexample_purging_before_safety(naive):
    run = purging_before_safety(naive)
    bad = run.violations()
    if naive:
        # q delivered m2, broadcast after m1, and never delivers m1 nor its
        # successor m3 -- m3 died with p because it was purged for a message
        # that was not yet safe: FIFO Completeness is violated (at q and r).
        assert run.D[2] == [(1, 1)] and run.D[3] == [(1, 1)]
        assert ("FIFO Completeness", "node 2 delivered (1, 1) but no m'' ⊒ (1, 0)") in bad
    else:
        # rpbcast purges m1 only once m3 is safe (held by f + 1 = 2
        # members); it never is, so p still holds m1 and repairs it: q and r
        # deliver m1 then m2.  m3 is never delivered by a correct process,
        # which FIFO-SRB allows (its broadcaster crashed).
        assert run.D[2] == [(1, 0), (1, 1)] and run.D[3] == [(1, 0), (1, 1)]
        assert not bad, bad


def obsolescence_chain(signalling, w, seconds=2.0, seed=5):
    """§2.2, first scenario.  p = 1 broadcasts m1 (item A) and m2, then an
    endless chain m3 ⊏ m4 ⊏ ... of item A (m1 ⊏ m3), one every 2 ms.  q = 3
    never gets m1 (every copy to it is lost); r = 2 gets everything.  m1 is
    purged as soon as m3 is safe.  Returns (run, when q delivered m2 or
    None) while the chain still runs."""
    g = srb_group(3, [1], seed=seed, f=1, w=w)
    run = Run(g)
    suppressed = set() if signalling else {T.PURGED, T.WINDOW}
    g.net.drop_filter = lambda src, dst, data: dst == 3 and any(
        is_copy(m, 1, {0}) or m.type in suppressed for m in msgs_of(data))
    publish_one(run, 1, 7)                            # m1
    publish_one(run, 1, None)                         # m2
    t0 = g.net.now
    when = None
    while g.net.now - t0 < seconds * NS:
        run.publish(1, 7)             # (with w = 8, the window may close for a moment)
        g.net.flush(1)
        g.net.run(0.002)
        run.consume(2)
        run.consume(3)
        if when is None and (1, 1) in run.Dset[3]:
            when = (g.net.now - t0) / NS
    return run, when


def test_counterexample_infinite_obsolescence_chain_naive_is_stuck():
    """Without purge signalling -- PURGED and WINDOW to q suppressed and a
    window (4096) larger than the run, so q never sees s + w -- q cannot
    deliver m2: it waits for m1, which will never come (it was purged
    everywhere), and no successor of m1 can tell it, because q never saw
    m1's label and the chain m3, m4, ... (all queued at q, all behind m1)
    never ends.  r, which got m1, delivers m2 and the chain."""
    run, when = obsolescence_chain(signalling=False, w=4096)
    assert when is None and run.D[3] == []
    assert (1, 1) in run.Dset[2] and len(run.B[1]) > 900
    assert run.g.E[1].node.srb_purged_by(1, 1, 0) == 2           # m1 purged, superseded by m3


@pytest.mark.parametrize("w", [4096, 8])
def test_counterexample_infinite_obsolescence_chain_signalled(w):
    """With purge signalling q learns m1 was purged and delivers m2 while
    the chain still runs: from a PURGED answer to its request for m1 (w =
    4096, no inference), or -- with PURGED and WINDOW still suppressed --
    from the window (w = 8): seeing seq 0 + 8 without seq 0."""
    if w == 4096:
        run, when = obsolescence_chain(signalling=True, w=w)
        assert run.g.E[3].traffic()["purged"][0] >= 1
    else:
        run, when = obsolescence_chain(signalling=False, w=w)
        assert "purged" not in run.g.E[3].traffic() and "window" not in run.g.E[3].traffic()
    assert when is not None and when < 0.5, when
    assert run.D[3][0] == (1, 1) and len(run.B[1]) > 900
    run.g.net.drop_filter = None
    run.g.net.run(1.0)
    run.drain_correct()
    assert not run.violations()


def test_disconnected_member_holds_the_window_and_catches_up():
    """A member that disconnects (Engine.disconnect) keeps its stream state,
    so stability must wait for it: messages used to leave the window as
    'stable' without it, and on reconnecting it took the sender's WINDOW
    notice as proof they were purged and skipped them (Agreement).  Now the
    window fills with what cannot be purged (8 unlabelled messages) and the
    sender is held back until it returns; then it gets everything."""
    g = srb_group(3, [1], w=8)
    run = Run(g)
    for _ in range(3):
        publish_one(run, 1, None)
    g.net.run(0.1)
    g.E[3].disconnect(g.net.now)
    g.net.run(0.05)
    g.net.drop_filter = lambda src, dst, data: 3 in (src, dst)
    published = sum(run.publish(1, None) for _ in range(20))
    assert published == 8                # seqs 0-2 are stable; 3-10 fill the window
    g.net.run(0.5)
    assert not run.publish(1, None)
    g.net.drop_filter = None
    g.E[3].reconnect(g.net.now)
    g.net.run(1.0)
    assert sum(run.publish(1, None) for _ in range(4)) == 4
    g.net.run(0.5)
    run.drain_correct()
    assert len(run.D[3]) == len(run.B[1]) == 15
    assert not run.violations()


def test_logger_keeps_no_delivery_queue_and_infers_purges(tmp_path):
    """A logger delivers nothing, but under FIFO-SRB it had a delivery queue
    per sender that nothing ever popped, so window inference grew its ring
    by a slot for every message, forever (up to 2**26 slots, ~1.6 GB).  Now
    it keeps no queue, and infers purges on its sequence tracker: it never
    gets m0 (item A, purged once m1 is safe) nor any PURGED answer, and gives
    up on m0 once it sees 0 + w."""
    w = 16
    g = Group(4, senders=[1], loggers=[4], tmp_path=tmp_path, delivery="fifo", deliver_own=True,
              srb_window=w, srb_f=1, gossip_interval=0.02, srb_report_interval=0.01)
    run = Run(g)
    g.net.drop_filter = cut_off_from_seq0(4)
    publish_one(run, 1, 7)
    publish_one(run, 1, 7)
    for k in range(600):
        run.publish(1, k % 5 if k % 3 else None)
        g.net.flush(1)
        g.net.run(0.001)
        run.drain_correct()
    g.net.run(0.5)
    L = g.E[4]
    slot = L.node.find_peer(1, 1)
    assert len(run.B[1]) > 500
    assert L.node.pending == 0
    assert L.node.peer_missing_count(slot) == 0 and L.counters()["forgotten"] == 1
    assert not L.node.holds(1, 1, 0) and L.node.holds(1, 1, 1)
    assert L.node.peer_contiguous(slot) == g.E[1].node.next_seq
    assert not run.violations()


def test_stock_workload_is_the_papers_access_pattern():
    # FIFO-SRB §3.2: 875 items; 25 take 50 % of the updates, 100 take 40 %,
    # 750 take 10 %, uniformly within a tier.  Deterministic in its seed.
    import numpy as np
    from rpbcast.sim.stock import StockWorkload
    n = 400_000
    lab = StockWorkload(seed=5).labels(n).astype(np.int64)
    assert np.array_equal(StockWorkload(seed=5).labels(n).astype(np.int64), lab)
    assert StockWorkload(seed=5).items == 875 and lab.min() >= 0 and lab.max() <= 874
    for lo, hi, share in ((0, 25, 0.50), (25, 125, 0.40), (125, 875, 0.10)):
        got = np.count_nonzero((lab >= lo) & (lab < hi)) / n
        assert abs(got - share) < 0.005, (lo, hi, got)
        per = np.bincount(lab[(lab >= lo) & (lab < hi)] - lo, minlength=hi - lo)
        expect = share * n / (hi - lo)
        # uniform within the tier: every item within 5 sigma of its share
        assert np.abs(per - expect).max() < 5 * np.sqrt(expect), (lo, hi, per.min(), per.max())


def test_regression_a_crashed_senders_message_reaches_a_member_that_missed_it_while_both_were_away():
    """A case the state machine found (CI, 2026-11-24): nodes 2 and 3 are
    each briefly disconnected, node 3 misses the sender's one message, the
    sender crashes 1 ms later, and each survivor holds the other as
    DISCONNECTED.  Agreement needs node 3 to get the message from node 2:
    the survivors must find each other (Engine._pick_target probes members
    held as away when no one else is left) and node 3 must learn that the
    message exists (Node.infer_idle)."""
    state = FifoSrbGroup()
    state.build(seed=0, n=3, f=1, w=4, two_senders=False)
    state.safety()
    for _ in range(8):
        state.advance(ms=1)
        state.safety()
    state.disconnect(ms=10, victim=2)
    state.safety()
    for _ in range(9):
        state.advance(ms=1)
        state.safety()
    state.disconnect(ms=10, victim=3)
    state.safety()
    for _ in range(1):
        state.advance(ms=1)
        state.safety()
    state.publish(labels=[None], which=0)
    state.safety()
    for _ in range(1):
        state.advance(ms=1)
        state.safety()
    state.crash(victim=1)
    state.safety()
    state.teardown()
