"""Trace event codes the control plane records (docs/traces.md).

The data plane records the per-message events itself; these are the ones
the control plane passes to ``Node.trace_event``.  The codes are defined
once, in csrc/trace.h, and reach Python through the core's ``TraceEvent``.
"""
from rpbcast.core.node import TraceEvent

EV_SEND = TraceEvent.SEND
EV_RECV = TraceEvent.RECV
EV_RECV_DUP = TraceEvent.RECV_DUP
EV_DELIVER = TraceEvent.DELIVER
EV_GAP = TraceEvent.GAP
EV_GOSSIP_OUT = TraceEvent.GOSSIP_OUT    # peer = target, size = bytes, aux = missing ids asked for
EV_GOSSIP_IN = TraceEvent.GOSSIP_IN      # peer = gossiper, size = bytes
EV_RTX_REQ = TraceEvent.RTX_REQ          # peer = logger, size = ids
EV_RTX_SERVED = TraceEvent.RTX_SERVED
EV_GCNOTE = TraceEvent.GCNOTE            # aux = 0 sent / 1 received, size = ids
EV_HEARTBEAT = TraceEvent.HEARTBEAT      # aux = 0 sent / 1 received
EV_MEMBER = TraceEvent.MEMBER            # sender = member, aux = new status
EV_PURGE = TraceEvent.PURGE
EV_LOST = TraceEvent.LOST                # seq = first, size = count
