"""Heartbeats (thesis §5.1): how members learn that messages exist.

* The idle heartbeat: when a sender falls silent, one multicast HEARTBEAT
  with its latest seq (the data plane sends it; this part decides when).
* The tail probe: before that, tail_probe (at least 2 x RTT) after the
  last send, one HEARTBEAT that is not yet the idle one.  A lost last
  message (a lone request of a ping-pong, the end of a burst) is otherwise
  seen only when the next message or the idle heartbeat comes: the probe
  shows the gap after about a round trip, so the receivers' immediate
  pull repairs it well under a millisecond on a LAN (TCP's tail-loss
  probe, QUIC's PTO).  One probe per silence, so at most one per
  tail_probe whatever the rate: a sender that never pauses sends none.
  On real sockets the UDP loop sends it (csrc/loop.c, tail_probe after the
  last publish); here, for the other drivers, at least 2 x RTT.
* The heartbeat signature every gossip carries (the data plane's hash of
  the idle streams' latest seqs): when a gossiper's differs from ours we
  answer with our idle list (HBLIST, flag REPLY), and it pushes back the
  entries we lack (flag PUSH).
* HBLIST with flag VECTOR: a sponsor's vector of every stream's latest seq,
  a joiner's t_join (§5.3, rpbcast.protocol.group).
"""
from __future__ import annotations

from rpbcast.core import wire
from rpbcast.core.node import StreamLimit
from rpbcast.protocol.trace_events import EV_HEARTBEAT

T = wire.MsgType
NS = 1_000_000_000
NEVER = 1 << 62

# HBLIST kinds: the idle list the heartbeat signature covers, or (flag
# VECTOR) a sponsor's vector of every stream's latest seq (t_join).
HB_IDLE = 0
HB_VECTOR = wire.F_VECTOR


def send_hblist(emit, mtu, dest, entries, flags, kind):
    """[(sender, inc, seq)] as HBLIST messages of kind HB_IDLE or HB_VECTOR,
    as many as it takes (one, empty, for no entries); aux = the size of the
    whole list, so a receiver knows when it has every part."""
    per = (mtu - wire.DG_HDR - wire.MSG_HDR) // 16
    flags |= kind
    if not entries:
        emit(dest, T.HBLIST, b"", flags)
        return
    for k in range(0, len(entries), per):
        emit(dest, T.HBLIST, wire.hb_entries(entries[k:k + per]), flags, aux=len(entries))


class Heartbeats:
    def __init__(self, engine):
        cfg = engine.cfg
        self.e = engine
        self.node = engine.node
        self.id = engine.id
        self.inc = engine.inc
        self.emit = engine.emit
        self._mtu = cfg.mtu
        self._idle_ns = int(round(cfg.idle_after * NS))
        self.idle_announced = -1          # next_seq value the idle heartbeat covered
        self._probe_ns = int(round(cfg.tail_probe * NS))
        self.probed = -1                  # next_seq value the tail probe covered
        self._idle_driven = False         # the driver keeps the idle deadline (hand_idle_to_driver)
        self._reply_parts = {}            # replier's address -> [list size, {(s, i): seq}, first part's time]
        self._parts_ns = int(round(cfg.gossip_interval * NS))

    def handlers(self):
        return {T.HBLIST: self.on_hblist}

    # ------------------------------------------------------------------ idle heartbeat
    def get_timer(self):
        node = self.node
        nxt = node.next_seq
        if nxt and self.idle_announced != nxt:
            if self._probe_ns and self.probed != nxt:
                return node.last_publish + self._probe_wait()
            if not self._idle_driven:
                return node.last_publish + self._idle_ns
        return NEVER

    def hand_idle_to_driver(self):
        """The driver keeps the idle heartbeat's deadline -- the UDP loop,
        in C: idle_after after the last publish, once per silence -- and
        runs the timers (on_timer) when it falls due; get_timer leaves it
        out.  As a control-plane timer every message moved it, so it called
        the control plane every idle_after for nothing while a stream
        lasted (in a spinning receiver, tens of microseconds inline).
        Returns the wait (ns) the driver is to use: this part's own, so that
        on_timer finds the silence long enough when the driver does."""
        self._idle_driven = True
        return self._idle_ns

    def hand_probe_to_driver(self):
        """The driver sends the tail probe itself (the UDP loop, in C, from
        whichever thread is awake: no control-plane call per publish);
        returns whether there is one to send.  driver_probe_ns() is its
        wait, to be read again as round trips are measured."""
        self._driver_probe_ns, self._probe_ns = self._probe_ns, 0
        return bool(self._driver_probe_ns)

    def driver_probe_ns(self):
        return self._probe_wait(self._driver_probe_ns)

    def _probe_wait(self, wait=None):
        # A probe sooner than a round trip after the send would only race
        # the message itself (and on a slow path every send would be probed).
        wait = self._probe_ns if wait is None else wait
        pings = getattr(self.e, "pings", None)
        rtt = pings.rtt_hint if pings is not None else None
        if rtt is not None:
            wait = max(wait, int(2 * rtt * NS))
        return min(wait, self._idle_ns)

    def on_timer(self, now):
        node = self.node
        nxt = node.next_seq
        if not nxt or self.idle_announced == nxt:
            return
        quiet = now - node.last_publish
        if quiet >= self._idle_ns:
            # one multicast when the sender falls silent (§5.1)
            node.send_heartbeat(True)
            self.idle_announced = self.probed = nxt
            node.trace_event(now, EV_HEARTBEAT, self.id, self.inc, nxt - 1, 0, 0, 0)
        elif self._probe_ns and self.probed != nxt and quiet >= self._probe_wait():
            node.send_heartbeat(False)
            self.probed = nxt
            st = self.e.stats
            st["tail_probes"] = st.get("tail_probes", 0) + 1

    # ------------------------------------------------------------------ HBLIST
    def send_list(self, dest, entries, flags, kind):
        send_hblist(self.emit, self._mtu, dest, entries, flags, kind)

    def reply_idle_list(self, dest):
        """A gossiper's heartbeat signature differs from ours: our idle list."""
        self.send_list(dest, self.node.idle_entries(), wire.F_REPLY, HB_IDLE)

    def on_hblist(self, msg, now):
        type_, flags, sender, inc, aux, seq, body, source, source_inc, src = msg
        entries = wire.read_hb_entries(body)
        node = self.node
        group = self.e.group
        vector = bool(flags & wire.F_VECTOR)
        if vector and group.takes_vector(source, aux):
            group.take_t_join(entries)
        else:
            members = self.e.members
            refused = 0
            for s, i, q in entries:
                if s == self.id and i == self.inc:
                    continue
                if s not in members and s != source:
                    # A stream of a node that is no member: nothing we will
                    # ever be asked to deliver, only state (issue 14).
                    refused += 1
                    continue
                try:
                    slot = node.peer(s, i, 0)
                except StreamLimit:
                    continue            # counted (streams_refused)
                node.heartbeat(slot, q, not vector, now)
            if refused:
                st = self.e.stats
                st["hblist_strangers"] = st.get("hblist_strangers", 0) + refused
        if flags & wire.F_REPLY and not vector:
            # Push back what the replier is behind on: entries it holds at an
            # older seq at once, entries it lacks only once every part of its
            # list is here (a part lacks most entries: pushing on each part
            # multiplied the traffic by the number of parts -- a storm when
            # the lists never agree, e.g. a node at max_streams).
            theirs = {(s, i): q for s, i, q in entries}
            acc = self._reply_parts.get(src)
            if acc is None and len(self._reply_parts) >= 256:
                self._reply_parts.clear()        # bounded: anyone can send a part
            if acc is None or acc[0] != aux or now - acc[2] > self._parts_ns:
                acc = self._reply_parts[src] = [aux, {}, now]
            acc[1].update(theirs)
            if len(acc[1]) >= aux:
                del self._reply_parts[src]
                have = acc[1]
                push = [e for e in node.idle_entries() if have.get((e[0], e[1]), -1) < e[2]]
            else:
                push = [e for e in node.idle_entries() if -1 < theirs.get((e[0], e[1]), -1) < e[2]]
            if push:
                self.send_list(src, push, wire.F_PUSH, HB_IDLE)
        # as after a received batch: the list may show gaps to pull at once
        self.e._after_rx(now)
