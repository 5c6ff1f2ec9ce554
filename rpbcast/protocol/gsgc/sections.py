"""GSGC's own gossip section (docs/gsgc.md, "Wire").

Kind 0x47, an unknown kind to v1 nodes and so safe to ignore
(wire-format.md §8).  It precedes the STABILITY and LIVE sections of a
layer and says which layer and which view they belong to, and carries the
adaptive step in use.  Not in the core wire format (rpbcast.core.wire): it
exists only between members that run GSGC.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from rpbcast.core import wire

SEC_GSGC = 0x47
CTL_GLOBAL_S = 0x01                     # flag: a STABILITY message body (global S) follows
# wire: u64 view hash, u8 layer, u8 flags, u16 0, u32 step (us), u32 step epoch
_CTL = struct.Struct("<QBBHII")


class Control(NamedTuple):
    view_hash: int
    layer: int
    flags: int
    step_us: int
    epoch: int              # (epoch << 16) | leader id & 0xffff
    extra: bytes            # with CTL_GLOBAL_S: a STABILITY message body


def control_section(view_hash: int, layer: int, flags: int, step_us: int, epoch: int,
                    extra: bytes = b"") -> bytes:
    return wire.section(SEC_GSGC, _CTL.pack(view_hash, layer, flags, 0, step_us & 0xFFFFFFFF, epoch) + extra)


def read_control(data):
    """The Control of a SEC_GSGC section's data, or None if it is short."""
    if len(data) < _CTL.size:
        return None
    h, layer, flags, _, step_us, ep = _CTL.unpack_from(data, 0)
    return Control(h, layer, flags, step_us, ep, bytes(data[_CTL.size:]))
