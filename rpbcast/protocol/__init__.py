"""The control plane: sans-IO protocol state machines.

``engine`` composes one member's protocol from its parts -- ``group``
(membership), ``repair`` and ``pulls`` (asking for what is missing),
``serving`` (answering), ``heartbeats``, ``pings``, ``send_buffer``
(logger ACKs and the release strategies); extensions (``logger``,
``fifo_srb``, ``gsgc``) add features through the public context of
``extension``; ``membership``, ``selection`` and ``trace_events`` are the
bookkeeping the parts share.  No sockets, clocks or threads: drivers
(``rpbcast.drivers``, ``rpbcast.sim``) feed events in and take datagrams out.
"""
