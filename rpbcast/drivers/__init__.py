"""Drivers: what moves an engine's datagrams and time.

``udp`` (real sockets and the C I/O loop), ``memnet`` (an in-memory network
for tests); the discrete-event simulator lives in ``rpbcast.sim``.  Every
driver talks to the engine through the same public contract
(docs/architecture.md, "The driver contract")."""
