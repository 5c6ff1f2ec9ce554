# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Loss channels: the per-packet loss decision of one link direction or one
receiving host, uniform or Gilbert-Elliott (the models and their
parameters are rpbcast/sim/loss.py).  Draws come from the network's
seeded uniform source, passed in by the caller.
"""

KIND_NONE, KIND_UNIFORM, KIND_GE = LOSS_NONE, LOSS_UNIFORM, LOSS_GE


cdef void chan_init(chan_t *c) noexcept:
    """No loss, for every class (the memory is zeroed)."""
    c.classes = 0xFFFFFFFF


cdef void chan_set(chan_t *c, int kind, double p, double r, double lg, double lb, uint32_t classes,
                   int state) noexcept:
    c.kind = kind
    c.p = p
    c.r = r
    c.loss_good = lg
    c.loss_bad = lb
    c.classes = classes
    c.state = state


cdef int chan_lose(chan_t *c, int cls, object rand) except -1:
    """Decide the fate of one packet of class cls: 1 lost."""
    cdef double u, q
    cdef int lost
    if c.kind == LOSS_NONE or not (c.classes >> cls) & 1:
        return False
    c.seen += 1
    if c.kind == LOSS_UNIFORM:
        if c.p <= 0:
            return False
        if c.p >= 1:
            lost = 1
        else:
            u = rand()
            lost = u < c.p
    else:
        # Gilbert-Elliott: loss decided in the current state, then one transition.
        q = c.loss_bad if c.state else c.loss_good
        if c.state:
            c.bad_pkts += 1
        if q >= 1:
            lost = 1
        elif q > 0:
            u = rand()
            lost = u < q
        else:
            lost = 0
        u = rand()
        if c.state:
            if u < c.r:
                c.state = 0
        elif u < c.p:
            c.state = 1
    if lost:
        c.lost += 1
    return lost


cdef tuple chan_state(chan_t *c):
    """(seen, lost, packets seen in the bad state, state)."""
    return c.seen, c.lost, c.bad_pkts, c.state
