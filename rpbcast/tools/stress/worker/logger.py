"""The logger's loop: its node does the work; the worker only drains the
trace until told to stop."""
from __future__ import annotations

import queue

from rpbcast.tools.stress.worker.channel import emit
from rpbcast.tools.stress.worker.node import ProtocolEvents, drain_trace, extensions, final_event, make_config


def run_logger(spec, cmds, tw_factory):
    """The logger's whole life; returns its node, still open."""
    from rpbcast.api import Node
    node = Node(make_config(spec).replace(role="logger"), extensions=extensions(spec))
    tw = tw_factory(node)
    emit(event="ready", id=node.node_id, inc=node.incarnation, addr=node.addr)
    events = ProtocolEvents()
    while True:
        try:
            c = cmds.get(timeout=0.25)
        except queue.Empty:
            drain_trace(node, tw)
            events.poll(node)
            continue
        if c["cmd"] == "stop":
            break
    drain_trace(node, tw)
    emit(**final_event(spec, node, "logger", events))
    return node
