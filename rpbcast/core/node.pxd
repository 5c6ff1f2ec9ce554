from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t

from rpbcast.core.csrc cimport rp_node_t, rp_peer_t, rp_flowack_t

cdef class Node:
    cdef rp_node_t n
    cdef object log
    cdef rp_flowack_t *flow
    cdef rp_peer_t *peer_at(self, uint32_t slot) except NULL


# Publishing and receiving, the parts every face shares: this node face, and
# the UDP driver's (rpbcast/drivers/udp.pyx), which calls the C core under
# its loop lock.  Same checks, same errors, whichever path the caller takes.

cdef int publish_label(object label, uint64_t *out) except -1
cdef int64_t published(int64_t r, size_t nbytes, uint32_t mtu) except -1
cdef int check_batch(const uint8_t[::1] payloads, const uint32_t[::1] lens,
                     const uint64_t[::1] labels) except -1
cdef const uint64_t *labels_ptr(const uint64_t[::1] labels)


cdef class Deliveries:
    cdef object senders, incs, seqs, labels, rx_times, offs, lens, streams
    cdef uint32_t[::1] s_, i_, o_, l_, st_
    cdef uint64_t[::1] q_, b_
    cdef int64_t[::1] t_
    cdef size_t max_n
    cdef size_t take(self, rp_node_t *n, uint8_t[::1] buf, int64_t now) noexcept nogil
    cdef tuple result(self, size_t k)
    cdef int copy_streams(self, uint32_t[::1] out, size_t k) except -1
