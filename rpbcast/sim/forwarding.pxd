"""A datagram's way from the sending host to the hosts it is for (forwarding.pyx)."""
cimport cython
from libc.stdint cimport int32_t, int64_t, uint64_t

from rpbcast.sim.events cimport EventQueue
from rpbcast.sim.hosts cimport Hosts
from rpbcast.sim.links cimport Links
from rpbcast.sim.packets cimport PacketPool
from rpbcast.sim.routes cimport Routes


@cython.final
cdef class Forwarder:
    cdef EventQueue ev
    cdef PacketPool pkts
    cdef Links links
    cdef Routes routes
    cdef Hosts hosts
    cdef readonly int n
    cdef int64_t *proc_ns               # router processing per node
    cdef int32_t header_bytes           # per packet on a link, beyond the datagram
    cdef public object send_filter      # (src, dest, data) -> True to drop at the sender
    cdef readonly uint64_t sent, unroutable, filtered

    cdef int send(self, int v, uint64_t dest, object data) except -1
    cdef int originate(self, int v, int32_t i, int64_t t) except -1
    cdef int forward(self, int v, int32_t i, int64_t t) except -1
    cdef int link_send(self, int32_t L, int32_t i, int64_t t) except -1
    cdef bint arrive(self, int v, int32_t i) except -1
