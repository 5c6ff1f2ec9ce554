"""The data plane's Cython faces: one module per concept of ``csrc/``.

``csrc.pxd`` declares the C core; each module here wraps one of its files
(``seqtrack``, ``digest``, ``signature``, ``stability``, ``srb``,
``msgstore``, ``wire``, ``logstore``) and ``node`` wraps ``csrc/node.c``, the
per-message data plane of one member.  Nothing here knows about sockets,
clocks or the protocol's control decisions.
"""
