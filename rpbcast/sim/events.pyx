# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The virtual clock and the heap of pending events.

One binary heap of plain structs ordered by (virtual time, insertion
number), so events at the same time run in the order they were scheduled
and a run is a pure function of its inputs.
"""
from libc.stdlib cimport malloc, realloc, free


cdef inline bint ev_less(ev_t *a, ev_t *b) noexcept nogil:
    return a.t < b.t or (a.t == b.t and a.seq < b.seq)


cdef class EventQueue:
    def __cinit__(self):
        self.cap = 1024
        self.heap = <ev_t *>malloc(self.cap * sizeof(ev_t))
        if not self.heap:
            raise MemoryError()
        self.n = 0
        self.seq = 0
        self.now = 0

    def __dealloc__(self):
        free(self.heap)

    cdef int push(self, int64_t t, int kind, int node, int arg, int link) except -1:
        cdef size_t i, p
        cdef ev_t e
        cdef ev_t *nh
        if self.n == self.cap:
            nh = <ev_t *>realloc(self.heap, 2 * self.cap * sizeof(ev_t))
            if not nh:
                raise MemoryError()
            self.heap = nh
            self.cap *= 2
        e.t = t
        e.seq = self.seq
        self.seq += 1
        e.kind = kind
        e.node = node
        e.arg = arg
        e.link = link
        i = self.n
        self.n += 1
        while i > 0:
            p = (i - 1) >> 1
            if not ev_less(&e, &self.heap[p]):
                break
            self.heap[i] = self.heap[p]
            i = p
        self.heap[i] = e
        if <int64_t>self.n > self.max_n:
            self.max_n = self.n
        return 0

    cdef void pop(self, ev_t *out) noexcept nogil:
        cdef size_t i = 0, c, n
        cdef ev_t last
        out[0] = self.heap[0]
        self.n -= 1
        n = self.n
        if n == 0:
            return
        last = self.heap[n]
        while True:
            c = 2 * i + 1
            if c >= n:
                break
            if c + 1 < n and ev_less(&self.heap[c + 1], &self.heap[c]):
                c += 1
            if not ev_less(&self.heap[c], &last):
                break
            self.heap[i] = self.heap[c]
            i = c
        self.heap[i] = last

    @property
    def pending(self):
        return self.n

    def next_time(self):
        return self.heap[0].t if self.n else None

    def advance(self, int64_t t):
        """Move the clock to t (never back)."""
        if t > self.now:
            self.now = t
