"""A loss channel: a link direction or a receiving host (channel.pyx)."""
from libc.stdint cimport int32_t, uint32_t, uint64_t

# loss model kinds
cdef enum:
    LOSS_NONE = 0
    LOSS_UNIFORM = 1
    LOSS_GE = 2


ctypedef struct chan_t:
    int32_t kind
    int32_t state        # Gilbert-Elliott: 0 good, 1 bad
    uint32_t classes     # bit mask of packet classes the model applies to
    double p             # uniform: loss probability; GE: P(good -> bad)
    double r             # GE: P(bad -> good)
    double loss_good
    double loss_bad
    uint64_t seen
    uint64_t lost
    uint64_t bad_pkts


cdef void chan_init(chan_t *c) noexcept
cdef void chan_set(chan_t *c, int kind, double p, double r, double lg, double lb, uint32_t classes,
                   int state) noexcept
cdef int chan_lose(chan_t *c, int cls, object rand) except -1
cdef tuple chan_state(chan_t *c)
