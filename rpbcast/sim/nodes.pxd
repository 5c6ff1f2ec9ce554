"""Nodes are numbered 1..n (node number = node id = address); arrays indexed
by node have n + 1 entries, entry 0 unused."""


cdef inline int check_node(int v, int n) except -1:
    if v < 1 or v > n:
        raise IndexError(f"node {v} out of range 1..{n}")
    return 0
