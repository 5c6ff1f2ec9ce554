"""Hosts: up or down, group members, CPU costs, receiver loss, traffic counters (hosts.pyx)."""
cimport cython
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t

from rpbcast.sim.channel cimport chan_t


@cython.final
cdef class Hosts:
    cdef readonly int n
    cdef uint8_t *member                # receives multicast
    cdef uint8_t *up                    # host running
    cdef int64_t *cpu_free              # host CPU busy until
    cdef double *send_a                 # host send cost ns = send_a + send_b * bytes
    cdef double *send_b
    cdef double *recv_f                 # receive cost = recv_f * send cost
    cdef chan_t *rxloss                 # per receiving host
    cdef uint64_t *rx_pkts
    cdef uint64_t *rx_bytes
    cdef uint64_t *tx_pkts
    cdef uint64_t *tx_bytes
    cdef uint64_t *rx_cls               # [v * NCLS + class]
    cdef uint64_t *tx_cls
    cdef int64_t *busy_ns
    cdef object rand                    # the network's uniform [0, 1) source, for loss

    cdef int64_t send_done(self, int v, int32_t nbytes, int32_t wire, int cls, int64_t now) noexcept
    cdef int64_t receive(self, int v, int32_t nbytes, int32_t wire, int cls, int64_t now) except -3
