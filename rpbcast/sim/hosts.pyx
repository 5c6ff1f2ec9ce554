# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Hosts: the machine behind a node.

A host is up or down (crashed: what reaches it is lost; the router in
front of it keeps forwarding), a group member or not (receives the
multicast), and optionally has a CPU cost per datagram (GSGC §4): sending
u bytes takes send_a + send_b * u ns, receiving recv_f times that, on one
CPU that serves sends and receives in FIFO order.  A loss channel per host
decides, after the network delivered a packet, whether the host gets it.
"""
from libc.stdint cimport uint32_t
from libc.stdlib cimport calloc, free
from libc.math cimport llround

import numpy as np

from rpbcast.sim.channel cimport chan_init, chan_set, chan_lose, chan_state
from rpbcast.sim.nodes cimport check_node
from rpbcast.sim.packets cimport NCLS


cdef class Hosts:
    def __cinit__(self, int n):
        cdef int k = n + 1
        cdef int v
        self.n = n
        self.member = <uint8_t *>calloc(k, 1)
        self.up = <uint8_t *>calloc(k, 1)
        self.cpu_free = <int64_t *>calloc(k, sizeof(int64_t))
        self.send_a = <double *>calloc(k, sizeof(double))
        self.send_b = <double *>calloc(k, sizeof(double))
        self.recv_f = <double *>calloc(k, sizeof(double))
        self.rxloss = <chan_t *>calloc(k, sizeof(chan_t))
        self.rx_pkts = <uint64_t *>calloc(k, sizeof(uint64_t))
        self.rx_bytes = <uint64_t *>calloc(k, sizeof(uint64_t))
        self.tx_pkts = <uint64_t *>calloc(k, sizeof(uint64_t))
        self.tx_bytes = <uint64_t *>calloc(k, sizeof(uint64_t))
        self.rx_cls = <uint64_t *>calloc(k * NCLS, sizeof(uint64_t))
        self.tx_cls = <uint64_t *>calloc(k * NCLS, sizeof(uint64_t))
        self.busy_ns = <int64_t *>calloc(k, sizeof(int64_t))
        if (not self.member or not self.up or not self.cpu_free or not self.send_a or not self.send_b
                or not self.recv_f or not self.rxloss or not self.rx_pkts or not self.rx_bytes
                or not self.tx_pkts or not self.tx_bytes or not self.rx_cls or not self.tx_cls
                or not self.busy_ns):
            raise MemoryError()
        for v in range(k):
            chan_init(&self.rxloss[v])

    def __dealloc__(self):
        free(self.member); free(self.up); free(self.cpu_free); free(self.send_a); free(self.send_b)
        free(self.recv_f); free(self.rxloss); free(self.rx_pkts); free(self.rx_bytes); free(self.tx_pkts)
        free(self.tx_bytes); free(self.rx_cls); free(self.tx_cls); free(self.busy_ns)

    # ---- set-up
    def set_rand(self, rand):
        self.rand = rand

    def set_member(self, int v, bint member):
        check_node(v, self.n)
        self.member[v] = member

    def set_up(self, int v, bint up):
        check_node(v, self.n)
        self.up[v] = up

    def set_cost(self, int v, double send_a_ns, double send_b_ns_per_byte, double recv_factor):
        check_node(v, self.n)
        self.send_a[v] = send_a_ns
        self.send_b[v] = send_b_ns_per_byte
        self.recv_f[v] = recv_factor

    def set_rx_loss(self, int v, int kind, double p, double r=0, double lg=0, double lb=1,
                    uint32_t classes=0xFFFFFFFF, int state=0):
        check_node(v, self.n)
        chan_set(&self.rxloss[v], kind, p, r, lg, lb, classes, state)

    def loss_state(self, int v):
        """(seen, lost, packets seen in the bad state, state) of v's loss channel."""
        check_node(v, self.n)
        return chan_state(&self.rxloss[v])

    # ---- datagrams
    cdef int64_t send_done(self, int v, int32_t nbytes, int32_t wire, int cls, int64_t now) noexcept:
        """The host at v sends a datagram of nbytes (wire bytes on a link)
        at now: when its CPU is done with it, or -1 without host costs."""
        cdef int64_t start, t
        self.tx_pkts[v] += 1
        self.tx_bytes[v] += wire
        self.tx_cls[v * NCLS + cls] += 1
        if not (self.send_a[v] > 0 or self.send_b[v] > 0):
            return -1
        start = self.cpu_free[v] if self.cpu_free[v] > now else now
        t = start + llround(self.send_a[v] + self.send_b[v] * nbytes)
        self.busy_ns[v] += t - start
        self.cpu_free[v] = t
        return t

    cdef int64_t receive(self, int v, int32_t nbytes, int32_t wire, int cls, int64_t now) except -3:
        """A packet the network delivered reaches the host at v at now: -2
        if the host is down or lost it, -1 if it takes it at once (no host
        costs), else when its CPU is done with it."""
        cdef int64_t c, start
        if not self.up[v]:
            return -2
        if self.rxloss[v].kind and chan_lose(&self.rxloss[v], cls, self.rand):
            return -2
        self.rx_pkts[v] += 1
        self.rx_bytes[v] += wire
        self.rx_cls[v * NCLS + cls] += 1
        if not (self.send_a[v] > 0 or self.send_b[v] > 0):
            return -1
        c = llround(self.recv_f[v] * (self.send_a[v] + self.send_b[v] * nbytes))
        start = self.cpu_free[v] if self.cpu_free[v] > now else now
        self.busy_ns[v] += c
        self.cpu_free[v] = start + c
        return start + c

    # ---- statistics
    def stats(self, calls):
        """Per node (index = node id; 0 unused), as a dict of NumPy arrays;
        calls: the driver's calls into each node's engine."""
        cdef int v, k = self.n + 1
        out = {key: np.zeros(k, np.int64) for key in (
            "rx_pkts", "rx_bytes", "tx_pkts", "tx_bytes", "rx_data", "rx_repair", "rx_control",
            "tx_data", "tx_repair", "tx_control", "rx_lost", "rx_loss_seen")}
        out["calls"] = calls
        out["cpu_busy_ns"] = np.zeros(k, np.int64)
        for v in range(k):
            out["rx_pkts"][v] = self.rx_pkts[v]
            out["rx_bytes"][v] = self.rx_bytes[v]
            out["tx_pkts"][v] = self.tx_pkts[v]
            out["tx_bytes"][v] = self.tx_bytes[v]
            out["rx_data"][v] = self.rx_cls[v * NCLS]
            out["rx_repair"][v] = self.rx_cls[v * NCLS + 1]
            out["rx_control"][v] = self.rx_cls[v * NCLS + 2]
            out["tx_data"][v] = self.tx_cls[v * NCLS]
            out["tx_repair"][v] = self.tx_cls[v * NCLS + 1]
            out["tx_control"][v] = self.tx_cls[v * NCLS + 2]
            out["rx_lost"][v] = self.rxloss[v].lost
            out["rx_loss_seen"][v] = self.rxloss[v].seen
            out["cpu_busy_ns"][v] = self.busy_ns[v]
        return out
