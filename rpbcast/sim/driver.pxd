"""Driving the engines through the driver contract (driver.pyx)."""
cimport cython
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from cpython.ref cimport PyObject

from rpbcast.sim.events cimport EventQueue
from rpbcast.sim.forwarding cimport Forwarder
from rpbcast.sim.hosts cimport Hosts
from rpbcast.sim.inputq cimport InputQueues
from rpbcast.sim.packets cimport PacketPool

# mode[v]: 0 = receive_datagram; MODE_DATA_PLANE = the C data plane, then
# on_data_plane on control or gap; MODE_EVERY_RX = ... and after every datagram
cdef enum:
    MODE_DATA_PLANE = 1
    MODE_EVERY_RX = 2


@cython.final
cdef class EngineDriver:
    cdef EventQueue ev
    cdef PacketPool pkts
    cdef Forwarder fwd
    cdef Hosts hosts
    cdef InputQueues inq
    cdef readonly int n
    cdef readonly list engines
    cdef list _nodes
    cdef PyObject **engs                # borrowed from engines
    cdef PyObject **nodes               # borrowed from _nodes (rpbcast.core.node.Node or None)
    cdef uint8_t *mode
    cdef int64_t *timer_at
    cdef uint64_t *calls                # Python control-plane calls per node
    cdef readonly uint64_t n_timer, n_fast_rx, n_slow_rx, n_ctl, n_stale_timer
    # wall-clock ns in the engines' receive paths (and everything they cause)
    cdef readonly int64_t w_ctl, w_slow

    cdef int host_rx(self, int v, int32_t i) except -1
    cdef int host_rx_now(self, int v, int32_t i) except -1
    cdef int data_plane_rx(self, int v, bytes data, int src) except -1
    cdef int engine_rx(self, int v, bytes data, int src) except -1
    cdef int collect(self, int v) except -1
    cdef int arm(self, int v) except -1
    cdef int fire_timer(self, int v, int64_t t) except -1
