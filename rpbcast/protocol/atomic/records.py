"""The atomic layer's records: what it puts in a member's reliable stream.

Every record is an ordinary DATA message of the sender's stream whose label
is ``ATOMIC_LABEL`` (2**64 - 2, reserved): it is ordered, gap-detected and
repaired from peers and loggers like any data, and the data plane keeps it
from the application (``Node.take_labelled(..., hide=True)``): the atomic
layer hands a proposal over itself, when it commits.

    PROPOSE  a proposal: the application's payload, the timeout, and how
             votes travel (flat: to the sender; tree: through aggregators)
    DECIDE   the sender's decisions on its proposals (any incarnation of it):
             (inc, seq, COMMIT | ABORT, reason), one or more
    BOOT     members this member found silent: out of the atomic view until
             they JOIN again (paper 004 §5)
    JOIN     the sender is (back) in the atomic view: the correcting join of
             a member that learns it was booted
    FENCE    a restarted sender: every proposal of its earlier incarnations
             that no DECIDE before this record commits is aborted
    PART     a piece of a payload too large for one datagram: (nonce, index)
             and the bytes; the PROPOSE that follows names the nonce, the
             count, the length and a digest of the whole payload

A payload that does not fit one datagram travels as PART records (each an
ordinary message, repaired and logged like any other) before a PROPOSE that
refers to them; a member votes only once it holds every part and the
digest matches.  The parts need not be adjacent to the PROPOSE in the
stream (another thread may publish between them): the nonce ties them.

Everything here validates what it reads: a record from the network that does
not parse is counted and ignored, never raised into the caller.
"""
from __future__ import annotations

import hashlib
import struct
from typing import List, NamedTuple, Optional, Tuple

ATOMIC_LABEL = 2 ** 64 - 2         # the label of atomic records (2**64 - 1 means "none")
VERSION = 1

PROPOSE, DECIDE, BOOT, JOIN, FENCE, PART = 1, 2, 3, 4, 5, 6

# Outcomes and reasons (a decision's, and an ABORTED answer's or a NO vote's).
COMMIT, ABORT = 1, 2
R_NONE, R_TIMEOUT, R_NO, R_BOOTED, R_LEFT, R_LOG, R_FENCED, R_SHUTDOWN, R_PARTS = 0, 1, 2, 3, 4, 5, 6, 7, 8
REASONS = {R_NONE: "", R_TIMEOUT: "timeout", R_NO: "a member voted no", R_BOOTED: "a member was booted",
           R_LEFT: "a member left", R_LOG: "the log failed", R_FENCED: "the sender restarted undecided",
           R_SHUTDOWN: "the sender shut down", R_PARTS: "the parts did not match the proposal"}

# How votes travel.
FLAT, TREE = 0, 1
SCHEMES = {"flat": FLAT, "tree": TREE}

_HDR = struct.Struct("<BBH")                 # kind, version, count / flags
_PROPOSE = struct.Struct("<BBBBIII")         # kind, version, scheme, 0, timeout ms, snapshot n, fanout
_DECISION = struct.Struct("<IBBHQ")          # inc, outcome, reason, 0, seq
_MEMBER = struct.Struct("<II")               # node id, inc
_FENCE = struct.Struct("<BBHI")              # kind, version, 0, below inc
_PART = struct.Struct("<BBHIQ")              # kind, version, 0, index, nonce
_REF = struct.Struct("<QIIQ16s")             # nonce, count, 0, length, digest (a PROPOSE's payload, F_PARTS)
F_PARTS = 1                                  # PROPOSE flag: the payload travels as PART records
PART_HDR = _PART.size
MAX_PARTS = 1 << 20                          # parts per payload (a 1 GiB payload in 1 KiB parts)
MAX_LENGTH = 1 << 32
MAX_DECISIONS = 64                           # per DECIDE record (1048 bytes)
MAX_BOOTED = 128
MAX_TIMEOUT_MS = 24 * 3600 * 1000


class PartsRef(NamedTuple):
    """What a PROPOSE with F_PARTS says of its payload."""
    nonce: int
    count: int
    length: int
    digest: bytes


class Propose(NamedTuple):
    scheme: int
    timeout_ns: int
    snapshot_n: int            # how many votes the sender waits for (informational)
    fanout: int                # tree: voters per aggregator
    payload: bytes             # the payload (b"" until assembled when ref is set)
    ref: Optional[PartsRef] = None


class Part(NamedTuple):
    nonce: int
    index: int
    data: bytes


def digest(payload) -> bytes:
    """The 16-byte digest a PROPOSE with parts carries of its payload."""
    return hashlib.blake2b(payload, digest_size=16).digest()


class Decision(NamedTuple):
    inc: int
    seq: int
    outcome: int
    reason: int


class RecordError(ValueError):
    """A record that does not parse (counted by the caller)."""


def propose(payload, timeout_ns: int, scheme: int = FLAT, fanout: int = 16, snapshot_n: int = 0) -> bytes:
    ms = max(1, min(int(timeout_ns // 1_000_000), MAX_TIMEOUT_MS))
    return _PROPOSE.pack(PROPOSE, VERSION, scheme, 0, ms, snapshot_n, fanout) + bytes(payload)


def propose_parts(payload, room: int, nonce: int, timeout_ns: int, scheme: int = FLAT, fanout: int = 16,
                  snapshot_n: int = 0) -> List[bytes]:
    """The PART records of payload (each at most room bytes) followed by
    the PROPOSE that refers to them."""
    chunk = room - PART_HDR
    if chunk < 1:
        raise ValueError(f"no room for a part in {room} bytes")
    payload = memoryview(bytes(payload))
    n = max(1, -(-len(payload) // chunk))
    if n > MAX_PARTS or len(payload) >= MAX_LENGTH:
        raise ValueError(f"an atomic payload of {len(payload)} bytes needs {n} parts, at most {MAX_PARTS}")
    out = [_PART.pack(PART, VERSION, 0, k, nonce) + payload[k * chunk:(k + 1) * chunk] for k in range(n)]
    ms = max(1, min(int(timeout_ns // 1_000_000), MAX_TIMEOUT_MS))
    out.append(_PROPOSE.pack(PROPOSE, VERSION, scheme, F_PARTS, ms, snapshot_n, fanout)
               + _REF.pack(nonce, n, 0, len(payload), digest(payload)))
    return out


def assemble(ref: PartsRef, pieces) -> Optional[bytes]:
    """The payload from pieces (index -> bytes), or None if they do not
    make ref's payload (a wrong length or digest)."""
    if len(pieces) != ref.count or any(k not in pieces for k in range(ref.count)):
        return None             # (a damaged journal may hold an index beyond the count)
    payload = b"".join(pieces[k] for k in range(ref.count))
    if len(payload) != ref.length or digest(payload) != ref.digest:
        return None
    return payload


def decide(decisions) -> bytes:
    """A DECIDE record of at most MAX_DECISIONS (inc, seq, outcome, reason)."""
    decisions = list(decisions)
    if not 0 < len(decisions) <= MAX_DECISIONS:
        raise ValueError(f"a DECIDE record carries 1..{MAX_DECISIONS} decisions")
    return _HDR.pack(DECIDE, VERSION, len(decisions)) + b"".join(
        _DECISION.pack(d.inc, d.outcome, d.reason, 0, d.seq) for d in decisions)


def boot(members) -> bytes:
    members = list(members)
    if not 0 < len(members) <= MAX_BOOTED:
        raise ValueError(f"a BOOT record names 1..{MAX_BOOTED} members")
    return _HDR.pack(BOOT, VERSION, len(members)) + b"".join(_MEMBER.pack(i, inc) for i, inc in members)


def join() -> bytes:
    return _HDR.pack(JOIN, VERSION, 0)


def fence(below_inc: int) -> bytes:
    return _FENCE.pack(FENCE, VERSION, 0, below_inc)


def parse(rec: bytes):
    """(kind, body): Propose, [Decision], [(node id, inc)], None (JOIN),
    below_inc (FENCE) or Part.  Raises RecordError."""
    if len(rec) < _HDR.size:
        raise RecordError("short record")
    kind, version, n = _HDR.unpack_from(rec)
    if version != VERSION:
        raise RecordError(f"record version {version}")
    if kind == PROPOSE:
        if len(rec) < _PROPOSE.size:
            raise RecordError("short PROPOSE")
        _, _, scheme, flags, ms, snap, fanout = _PROPOSE.unpack_from(rec)
        if scheme not in (FLAT, TREE) or flags & ~F_PARTS or not 0 < ms <= MAX_TIMEOUT_MS or not 1 <= fanout <= 4096:
            raise RecordError("bad PROPOSE header")
        if flags & F_PARTS:
            if len(rec) != _PROPOSE.size + _REF.size:
                raise RecordError("bad PROPOSE parts reference")
            nonce, count, zero, length, dg = _REF.unpack_from(rec, _PROPOSE.size)
            if zero or not 1 <= count <= MAX_PARTS or length >= MAX_LENGTH or count > length + 1:
                raise RecordError("bad PROPOSE parts reference")
            return kind, Propose(scheme, ms * 1_000_000, snap, fanout, b"", PartsRef(nonce, count, length, dg))
        return kind, Propose(scheme, ms * 1_000_000, snap, fanout, bytes(rec[_PROPOSE.size:]))
    if kind == DECIDE:
        if not 0 < n <= MAX_DECISIONS or len(rec) != _HDR.size + n * _DECISION.size:
            raise RecordError("bad DECIDE length")
        out = []
        for k in range(n):
            inc, outcome, reason, zero, seq = _DECISION.unpack_from(rec, _HDR.size + k * _DECISION.size)
            if outcome not in (COMMIT, ABORT) or zero or seq >= 1 << 62:
                raise RecordError("bad decision")
            out.append(Decision(inc, seq, outcome, reason))
        return kind, out
    if kind == BOOT:
        if not 0 < n <= MAX_BOOTED or len(rec) != _HDR.size + n * _MEMBER.size:
            raise RecordError("bad BOOT length")
        return kind, [_MEMBER.unpack_from(rec, _HDR.size + k * _MEMBER.size) for k in range(n)]
    if kind == JOIN:
        if len(rec) != _HDR.size or n:
            raise RecordError("bad JOIN")
        return kind, None
    if kind == FENCE:
        if len(rec) != _FENCE.size or n:
            raise RecordError("bad FENCE")
        return kind, _FENCE.unpack(rec)[3]
    if kind == PART:
        if len(rec) < _PART.size:
            raise RecordError("short PART")
        _, _, zero, index, nonce = _PART.unpack_from(rec)
        if zero or index >= MAX_PARTS:
            raise RecordError("bad PART")
        return kind, Part(nonce, index, bytes(rec[_PART.size:]))
    raise RecordError(f"unknown record kind {kind}")


def reason_text(reason: int) -> str:
    return REASONS.get(reason, f"reason {reason}")


def decisions_in(items: List[Tuple[int, int, int, int]]) -> List[bytes]:
    """(inc, seq, outcome, reason) tuples as DECIDE records."""
    out = []
    for k in range(0, len(items), MAX_DECISIONS):
        out.append(decide(Decision(*d) for d in items[k:k + MAX_DECISIONS]))
    return out


def maybe(rec: bytes) -> Optional[tuple]:
    """parse(rec), or None when it does not parse."""
    try:
        return parse(rec)
    except (RecordError, struct.error):
        return None
