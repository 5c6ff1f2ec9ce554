# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Forwarding: a datagram's way from the host that sends it to the hosts it
is for.

A datagram an engine emits at node v becomes a packet; it leaves on v's
first link(s) at once, or after the host's send cost.  At each node after
the first, the router passes it on (after `proc_ns`, if set) along the
source's multicast tree or toward the unicast destination; a member host
there (or the destination) also receives it, at the same time: its loss
channel, then its receive cost.  What the host then does with it is the
engine driver's business (driver.pyx): arrive() only says whether the host
takes it now.
"""
from libc.stdlib cimport calloc, free
from cpython.bytes cimport PyBytes_Check

from rpbcast.sim.events cimport EV_ARRIVE, EV_FORWARD, EV_HOSTRX, EV_HOSTTX
from rpbcast.sim.nodes cimport check_node
from rpbcast.sim.packets cimport pkt_t

cdef uint64_t DEST_MCAST = 0xFFFFFFFFFFFFFFFF


cdef class Forwarder:
    def __cinit__(self, EventQueue ev not None, PacketPool pkts not None, Links links not None,
                  Routes routes not None, Hosts hosts not None):
        self.ev = ev
        self.pkts = pkts
        self.links = links
        self.routes = routes
        self.hosts = hosts
        self.n = hosts.n
        self.proc_ns = <int64_t *>calloc(self.n + 1, sizeof(int64_t))
        if not self.proc_ns:
            raise MemoryError()
        self.send_filter = None

    def __dealloc__(self):
        free(self.proc_ns)

    def set_proc(self, int v, int64_t ns):
        """Router processing at node v before a packet goes on."""
        check_node(v, self.n)
        self.proc_ns[v] = ns

    def set_header_bytes(self, int h):
        self.header_bytes = h

    cdef int send(self, int v, uint64_t dest, object data) except -1:
        """A datagram leaves host v's engine at now."""
        cdef int32_t i
        cdef int dst
        cdef int64_t t
        cdef pkt_t *p
        if not PyBytes_Check(data):
            data = bytes(data)
        if dest == DEST_MCAST:
            dst = 0
            self.routes.ensure_tree(v)
        else:
            if dest < 1 or dest > <uint64_t>self.n or dest == <uint64_t>v:
                self.unroutable += 1
                return 0
            dst = <int>dest
            self.routes.ensure_route(dst)
            if self.routes.uc_next[dst][v] < 0:
                self.unroutable += 1
                return 0
        if self.send_filter is not None and self.send_filter(v, dest, data):
            self.filtered += 1
            return 0
        i = self.pkts.new(<bytes>data, v, dst, self.ev.now, self.header_bytes)   # held while we work on it
        p = &self.pkts.p[i]
        self.sent += 1
        t = self.hosts.send_done(v, p.len, p.wire, p.cls, self.ev.now)
        if t >= 0:
            p.refs += 1
            self.ev.push(t, EV_HOSTTX, v, i, -1)
        else:
            self.originate(v, i, self.ev.now)
        self.pkts.unref(i)
        return 0

    cdef int originate(self, int v, int32_t i, int64_t t) except -1:
        """Packet i leaves its source v on the first link(s) at t."""
        cdef pkt_t *p = &self.pkts.p[i]
        cdef int32_t k, a, b
        cdef int32_t *ls
        if p.dst == 0:
            a = self.routes.mc_off[v][v]
            b = self.routes.mc_off[v][v + 1]
            ls = self.routes.mc_links[v]
            for k in range(a, b):
                self.link_send(ls[k], i, t)
        else:
            self.link_send(self.routes.uc_next[p.dst][v], i, t)
        return 0

    cdef int forward(self, int v, int32_t i, int64_t t) except -1:
        """Packet i is at router v at time t (processing done): pass it on."""
        cdef pkt_t *p = &self.pkts.p[i]
        cdef int32_t k, a, b, src, L
        cdef int32_t *off
        cdef int32_t *ls
        if p.dst == 0:
            src = p.src
            off = self.routes.mc_off[src]
            a = off[v]
            b = off[v + 1]
            ls = self.routes.mc_links[src]
            for k in range(a, b):
                self.link_send(ls[k], i, t)
        elif p.dst != v:
            L = self.routes.uc_next[p.dst][v]
            if L < 0:
                self.unroutable += 1
            else:
                self.link_send(L, i, t)
        return 0

    cdef int link_send(self, int32_t L, int32_t i, int64_t t) except -1:
        """Packet i enters the queue of link L at time t."""
        cdef pkt_t *p = &self.pkts.p[i]
        cdef int64_t at = self.links.enter(L, p.wire, p.cls, t)
        if at >= 0:
            p.refs += 1
            self.ev.push(at, EV_ARRIVE, self.links.l[L].b, i, L)
        return 0

    cdef bint arrive(self, int v, int32_t i) except -1:
        """Packet i reaches node v (now): the router passes it on, and the
        host there receives it if it is for it.  True: the host takes it
        now (else it was not for it, was lost, or waits for the CPU)."""
        cdef pkt_t *p = &self.pkts.p[i]
        cdef int64_t now = self.ev.now
        cdef int64_t t
        cdef bint here
        if p.dst == 0:
            here = self.hosts.member[v] and v != p.src
        else:
            here = p.dst == v
        # forward first (routers work in parallel with the host behind them)
        if p.dst == 0 or not here:
            if self.proc_ns[v] > 0:
                p.refs += 1
                self.ev.push(now + self.proc_ns[v], EV_FORWARD, v, i, -1)
            else:
                self.forward(v, i, now)
        if not here:
            return False
        t = self.hosts.receive(v, p.len, p.wire, p.cls, now)
        if t == -1:
            return True
        if t >= 0:
            p.refs += 1
            self.ev.push(t, EV_HOSTRX, v, i, -1)
        return False
