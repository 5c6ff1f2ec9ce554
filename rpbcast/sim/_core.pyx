# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The simulator's C core (docs/simulator.md): its pieces, assembled, and the
event loop that runs them.

Lower pieces first, none importing a higher one:

    events      the virtual clock and the heap of pending events
    packets     packets in flight, sharing the datagram's bytes
    channel     loss channels (uniform, Gilbert-Elliott)
    links       link directions: FIFO queues, serialisation, latency, loss
    routes      multicast trees and unicast next hops
    hosts       up/down, members, CPU costs, receiver loss, counters
    inputq      input queues of hosts with a bounded delivery queue
    forwarding  a datagram's way from its sender to the hosts it is for
    driver      the engines, driven through the driver contract
    deliveries  taking deliveries from the data planes (the drain)

The loop pops an event, moves the clock and hands the event to the piece
it is for; the per-event path is C calls on structs, with no Python
object per event.  The pieces are attributes (``core.links`` ...) for
set-up and statistics; what spans several of them is a method here.
"""
cimport numpy as cnp

from rpbcast.sim import deliveries
from rpbcast.sim.events cimport ev_t, EV_ARRIVE, EV_FORWARD, EV_HOSTRX, EV_HOSTTX, EV_TIMER, EV_CALL
from rpbcast.sim.nodes cimport check_node
from rpbcast.sim.wallclock cimport wall_ns

cnp.import_array()


cdef class Core:
    def __cinit__(self, int n, int nlinks):
        self.n = n
        self.events = EventQueue()
        self.packets = PacketPool()
        self.links = Links(nlinks, n)
        self.routes = Routes(n, nlinks)
        self.hosts = Hosts(n)
        self.inputq = InputQueues(n)
        self.forwarder = Forwarder(self.events, self.packets, self.links, self.routes, self.hosts)
        self.driver = EngineDriver(self.events, self.packets, self.forwarder, self.hosts, self.inputq)
        self.calls = {}
        self.next_call = 0
        self.stopped = False

    # ================================================================ set-up
    def set_rand(self, rand):
        """The network's uniform [0, 1) source (random.Random(seed).random), for loss."""
        self.links.set_rand(rand)
        self.hosts.set_rand(rand)

    def set_host(self, int v, engine, bint member=True, bint fast=False):
        """Attach an engine at node v (an address equal to v).  fast: drive
        it through the C data plane (its driver_needs must allow it)."""
        check_node(v, self.n)
        self.driver.attach(v, engine, fast)
        self.hosts.member[v] = member
        self.hosts.up[v] = 1

    def set_up(self, int v, bint up):
        """Crash (False) or restart (True) the host at v; the router keeps forwarding."""
        self.hosts.set_up(v, up)
        if not up:
            self.driver.stop_timer(v)

    def is_fast(self, int v):
        """The engine at v is driven through the C data plane."""
        return self.driver.is_fast(v)

    def set_rx_limit(self, int v, int64_t limit):
        """Bound the delivery queue at v (the paper's bounded receiver
        buffers, FIFO-SRB §3.2): while `limit` or more messages wait for v's
        application, datagrams reaching v's host wait unprocessed in an
        unbounded input queue, in order, until release(v) finds room.
        limit < 0 removes the bound (held datagrams stay until release)."""
        check_node(v, self.n)
        self.inputq.set_limit(v, limit, getattr(self.driver.engines[v], "node", None) if limit >= 0 else None)

    def release(self, int v):
        """Hand v's held datagrams to its engine, in order, while its
        delivery queue is below the limit (call after the application read).
        Returns how many were handed over."""
        return self.driver.release(v)

    def rx_queue(self, int v):
        """(messages waiting for the application, datagrams held, datagrams
        ever held, most held at once) at a host with a bounded queue."""
        return self.inputq.state(v)

    # ================================================================ time
    @property
    def now(self):
        return self.events.now

    @property
    def pending_events(self):
        return self.events.n

    def advance(self, int64_t t):
        self.events.advance(t)

    def start(self, int v):
        """Read engine v's first timer."""
        self.driver.start(v)

    def flush(self, int v):
        """After touching engine v from Python: send its datagrams, re-read its timer."""
        self.driver.flush(v)

    def at(self, int64_t t, fn, int node=0):
        """Call fn() at virtual time t (not before now).  With node, the
        engine there is flushed afterwards (datagrams sent, timer re-read)."""
        if node:
            check_node(node, self.n)
        if t < self.events.now:
            t = self.events.now
        cid = self.next_call
        self.next_call += 1
        self.calls[cid] = fn
        self.events.push(t, EV_CALL, node, cid, -1)
        return cid

    def cancel(self, int cid):
        self.calls.pop(cid, None)

    def stop(self):
        """End run() after the current event."""
        self.stopped = True

    # ================================================================ the loop
    def run(self, int64_t until):
        """Process events up to and including virtual time until (or until
        stop()); returns the number processed."""
        cdef EventQueue ev = self.events
        cdef PacketPool pkts = self.packets
        cdef Forwarder fwd = self.forwarder
        cdef EngineDriver drv = self.driver
        cdef ev_t e
        cdef uint64_t k = 0
        cdef int64_t w0, wstart = wall_ns()
        self.stopped = False
        while ev.n and not self.stopped:
            if ev.heap[0].t > until:
                break
            ev.pop(&e)
            if e.t > ev.now:
                ev.now = e.t
            k += 1
            if e.kind == EV_ARRIVE:
                self.n_arrive += 1
                if fwd.arrive(e.node, e.arg):
                    drv.host_rx(e.node, e.arg)
                pkts.unref(e.arg)
            elif e.kind == EV_FORWARD:
                fwd.forward(e.node, e.arg, ev.now)
                pkts.unref(e.arg)
            elif e.kind == EV_HOSTRX:
                drv.host_rx(e.node, e.arg)
                pkts.unref(e.arg)
            elif e.kind == EV_HOSTTX:
                fwd.originate(e.node, e.arg, ev.now)
                pkts.unref(e.arg)
            elif e.kind == EV_TIMER:
                w0 = wall_ns()
                drv.fire_timer(e.node, e.t)
                self.w_timer += wall_ns() - w0
            else:
                w0 = wall_ns()
                self.call(e.node, e.arg)
                self.w_call += wall_ns() - w0
        self.n_events += k
        self.w_run += wall_ns() - wstart
        if not self.stopped and until > ev.now and (not ev.n or ev.heap[0].t > until):
            ev.now = until
        return k

    cdef int call(self, int v, int cid) except -1:
        """A scheduled Python callable; then the engine at v (if any) is flushed."""
        fn = self.calls.pop(cid, None)
        if fn is None:
            return 0
        self.n_call += 1
        fn()
        if v and self.driver.engs[v] != NULL and self.hosts.up[v]:
            self.driver.collect(v)
            self.driver.arm(v)
        return 0

    # ================================================================ deliveries
    def drain(self, cnp.int32_t[::1] nodes not None, int size, bint check):
        """Take every delivery waiting at the given nodes (engines on the C
        path) straight from their data planes: deliveries.drain."""
        planes = [self.driver.node(nodes[i]) for i in range(nodes.shape[0])]
        return deliveries.drain(planes, size, check, self.events.now)

    # ================================================================ statistics
    def link_stats(self):
        """Per link direction, as a dict of NumPy arrays (index = link)."""
        return self.links.stats(self.events.now)

    def node_stats(self):
        """Per node (index = node id; 0 unused), as a dict of NumPy arrays."""
        return self.hosts.stats(self.driver.call_counts())

    def counters(self):
        f, d = self.forwarder, self.driver
        return {"events": self.n_events, "arrivals": self.n_arrive, "timers": d.n_timer,
                "calls": self.n_call, "fast_rx": d.n_fast_rx, "slow_rx": d.n_slow_rx,
                "control_rx": d.n_ctl, "unroutable": f.unroutable, "filtered": f.filtered,
                "sent": f.sent, "stale_timers": d.n_stale_timer, "max_heap": self.events.max_n}

    def wall(self):
        """Seconds of wall time: in run(), and within it in Python engine
        calls: timers (handle_timer, datagrams_to_send, get_timer), control
        (the control plane after a datagram), slow (receive_datagram for
        engines not on the C path), calls (scheduled Python callables:
        publishing).  loop = the rest: event loop, network model, C data plane."""
        r = {"run": self.w_run / 1e9, "engine_timers": self.w_timer / 1e9,
             "engine_control": self.driver.w_ctl / 1e9, "engine_slow_rx": self.driver.w_slow / 1e9,
             "calls": self.w_call / 1e9}
        r["loop"] = r["run"] - r["engine_timers"] - r["engine_control"] - r["engine_slow_rx"] - r["calls"]
        return r
