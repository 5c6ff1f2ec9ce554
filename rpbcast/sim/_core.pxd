"""The simulator's C core: its pieces and the event loop that runs them (_core.pyx)."""
cimport cython
from libc.stdint cimport int32_t, int64_t, uint64_t

from rpbcast.sim.driver cimport EngineDriver
from rpbcast.sim.events cimport EventQueue
from rpbcast.sim.forwarding cimport Forwarder
from rpbcast.sim.hosts cimport Hosts
from rpbcast.sim.inputq cimport InputQueues
from rpbcast.sim.links cimport Links
from rpbcast.sim.packets cimport PacketPool
from rpbcast.sim.routes cimport Routes


@cython.final
cdef class Core:
    cdef readonly int n                 # nodes are 1..n
    cdef readonly EventQueue events
    cdef readonly PacketPool packets
    cdef readonly Links links
    cdef readonly Routes routes
    cdef readonly Hosts hosts
    cdef readonly InputQueues inputq
    cdef readonly Forwarder forwarder
    cdef readonly EngineDriver driver
    cdef bint stopped
    cdef dict calls                     # call id -> Python callable
    cdef int32_t next_call
    cdef readonly uint64_t n_events, n_arrive, n_call
    # wall-clock ns in run(), and in it in timers and scheduled calls
    cdef readonly int64_t w_timer, w_call, w_run

    cdef int call(self, int v, int cid) except -1
