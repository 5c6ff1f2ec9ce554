"""The control plane: sans-IO protocol state machines.

``engine`` composes one member's protocol from its parts; extensions
(``logger``, ``fifo_srb``, ``gsgc``) add features through the public
context of ``extension``; ``membership`` and ``selection`` are the
bookkeeping the parts share.  No sockets, clocks or threads: drivers
(``rpbcast.drivers``, ``rpbcast.sim``) feed events in and take datagrams out.
"""
