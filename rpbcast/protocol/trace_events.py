"""Trace event codes the control plane records (docs/traces.md).

The values of csrc/trace.h (``RP_EV_*``): the data plane records the
per-message events itself; these are the ones the control plane passes to
``Node.trace_event``.  One Python copy, for every engine and baseline.
"""

# values of csrc/trace.h
EV_SEND = 1
EV_RECV = 2
EV_RECV_DUP = 3
EV_DELIVER = 4
EV_GAP = 5
EV_GOSSIP_OUT = 6      # peer = target, size = bytes, aux = missing ids asked for
EV_GOSSIP_IN = 7       # peer = gossiper, size = bytes
EV_RTX_REQ = 8         # peer = logger, size = ids
EV_RTX_SERVED = 9
EV_GCNOTE = 10         # aux = 0 sent / 1 received, size = ids
EV_HEARTBEAT = 11      # aux = 0 sent / 1 received
EV_MEMBER = 12         # sender = member, aux = new status
EV_PURGE = 13
EV_LOST = 14           # seq = first, size = count
