"""libFuzzer target (atheris) for the wire v1 decoder, csrc/wire.c.

Every input goes through wire.check(); on OK it must also parse(), its
bodies must read back with the Python body helpers (and MISSING digests
decode), and re-encoding the parsed messages must give back the input byte
for byte.  On any other reason parse() must raise WireError with that same
reason.  A crash, a sanitizer report or a failed assertion is a finding.

The input is copied into an exact-size numpy buffer before it reaches C, so
that an AddressSanitizer build sees a read one byte past the end (a Python
bytes object has a spare NUL there).  See fuzz/README.md.
"""
import os
import struct
import sys

import atheris

import numpy as np

# rpbcast is imported by _load() on the first input: a core built with
# -fsanitize-coverage=trace-cmp (see README.md) calls libFuzzer's hooks, which
# only exist once atheris.Fuzz() has loaded libFuzzer.
digest = wire = T = R = SECTIONED = node = SERVE = None


def _load():
    global digest, wire, T, R, SECTIONED, node, SERVE
    # Fuzz() loaded libFuzzer (atheris's core) RTLD_LOCAL; promote it to
    # global scope so the instrumented extensions resolve its hooks.
    import ctypes
    import glob
    for lib in glob.glob(os.path.join(os.path.dirname(atheris.__file__), "core_with_libfuzzer*.so")):
        try:
            ctypes.CDLL(lib, mode=os.RTLD_GLOBAL | os.RTLD_NOLOAD)
        except OSError:
            pass            # not loaded (a build without libFuzzer)
    from rpbcast.core import digest, wire
    from rpbcast.core.node import SERVE_GCNOTE, Node
    T = wire.MsgType
    R = wire.Reason
    SECTIONED = (T.RTX, T.GCNOTE, T.GAPNOTE)
    # A node that holds a few of its own messages, to serve MISSING sections.
    SERVE = SERVE_GCNOTE
    node = Node(1, 1, 0, max_scan=256)
    node.hold_send = False
    for _ in range(8):
        node.publish(b"m")
    node.datagrams()


def serve(body):
    """Serve a body of sections (rp_node_serve_missing): never a crash;
    malformed framing is a WireError and serves nothing."""
    try:
        node.serve_missing(body, 2, SERVE, 0)
    except wire.WireError:
        assert not node.out_pending
    node.datagrams()


def reencode(h, msgs, data):
    b = wire.Builder(h.group, h.source, h.source_inc, h.dseq, mtu=wire.MAX_DGRAM)
    for m in msgs:
        assert b.add(*m), "a parsed message does not fit again"
    out = bytearray(b.finish())
    if h.mac_len:
        out[3] |= wire.DGF_MAC
        struct.pack_into("<H", out, 18, h.mac_len)
        out += data[len(data) - h.mac_len:]
    return bytes(out)


def read_missing(data):
    s, i, d = wire.read_missing(data)
    iv, frm, upto, used = digest.decode(d)
    assert used == len(d) and frm <= upto
    for lo, hi in iv.tolist():
        assert frm <= lo <= hi <= upto


def read_sections(secs, only_missing):
    for kind, flags, data in secs:
        if kind == wire.Section.MISSING:
            assert flags == 0
            read_missing(data)
        elif kind in (wire.Section.LASTSEEN, wire.Section.STABILITY, wire.Section.LIVE):
            assert not only_missing and flags == 0
            if kind == wire.Section.LASTSEEN:
                assert len(wire.read_hb_entries(data)) * 16 == len(data)
            elif kind == wire.Section.STABILITY:
                r, senders, M, S, W, n = wire.read_stability(data)
                assert len(senders) == len(M) == len(S) and len(W) == (n + 63) // 64
            else:
                n = struct.unpack_from("<I", data)[0]
                assert len(wire.read_live(data)) == n


def read_body(m):
    t, body = m.type, m.body
    if t == T.GOSSIP:
        read_sections(wire.read_gossip(body)[3], False)
    elif t in SECTIONED:
        read_sections(wire.sections(body), True)
    elif t == T.LOGACK and body:
        iv, frm, upto, used = digest.decode(body)
        assert used == len(body)
    elif t in (T.HBLIST, T.PURGED):
        assert len(wire.read_hb_entries(body)) == len(body) // 16
    elif t in (T.JOIN, T.MEMBERS):
        assert len(wire.read_members(body)) * wire.MEMBER_ENTRY == len(body)
    elif t == T.STABILITY:
        r, entries = wire.read_stability_body(body)
        assert 16 + 16 * len(entries) == len(body)
    elif t == T.ATOMIC and m.flags & wire.F_VOTERS:
        assert len(wire.read_voter_ids(body)) * 4 == len(body)


def TestOneInput(data):
    if wire is None:
        _load()
    buf = np.frombuffer(data, dtype=np.uint8).copy()
    # A Python-level mirror of the first header checks: atheris traces these
    # comparisons, which steers libFuzzer to the magic and version even
    # though the C code itself carries no coverage instrumentation.
    if len(data) >= 4 and data[:2] == b"RP" and data[2] == 1 and data[3] <= 1:
        pass
    serve(buf)                  # any bytes, taken as a body of sections
    r = wire.check(buf)
    if r != R.OK:
        assert R(r) not in (R.GROUP, R.AUTH), r    # R(r) raises for an unknown code
        try:
            wire.parse(buf)
        except wire.WireError as e:
            assert e.reason == r
        else:
            raise AssertionError("check() rejected what parse() accepted")
        return
    h, msgs = wire.parse(buf)
    assert h.count == len(msgs) >= 1
    for m in msgs:
        T(m.type)
        read_body(m)
        if m.type in (T.GOSSIP, T.RTX):
            body = np.frombuffer(m.body, dtype=np.uint8).copy()
            node.serve_missing(body[wire.GOSSIP_FIXED:] if m.type == T.GOSSIP else body, 2, SERVE, 0)
            node.datagrams()
    assert reencode(h, msgs, data) == data, "re-encoding differs"


def seeds(directory):
    """Write a seed corpus: one valid datagram per message type, a mixed
    one with a MAC trailer, and a few gossip/section variants."""
    os.makedirs(directory, exist_ok=True)
    dig = digest.encode([[1005, 1007], [1010, 1010]], 1000, 1020)[0]
    member = wire.member_entry(wire.Member(7, 3, 1, 0, 4791, 0x0A000001, 5, 10**18, 99))
    ms = {
        T.PAD: (T.PAD, 0, 0, 0, 0, 0, bytes(8)),
        T.DATA: (T.DATA, wire.F_LABEL, 7, 3, 0, 42, struct.pack("<Q", 9) + b"payload"),
        T.REPAIR: (T.REPAIR, wire.F_FROM_LOGGER, 7, 3, 0, 41, b"payload"),
        T.HEARTBEAT: (T.HEARTBEAT, wire.F_IDLE | wire.F_FIRST, 7, 3, 0, 42, struct.pack("<Q", 0)),
        T.GOSSIP: (T.GOSSIP, 0, 7, 3, 0, 1, wire.gossip_body(1, 2, 3, [
            wire.missing_section(9, 1, dig), wire.lastseen_section([(9, 1, 1021)]),
            wire.stability_section(4, [(9, 1)], [1000], [990], [1], 3),
            wire.live_section([0, 1, 2]), wire.section(99, b"future")])),
        T.HBLIST: (T.HBLIST, wire.F_REPLY, 7, 3, 1, 0, wire.hb_entries([(9, 1, 1020)])),
        T.RTX: (T.RTX, 0, 7, 3, 0, 0, wire.missing_section(9, 1, dig)),
        T.GCNOTE: (T.GCNOTE, 0, 7, 3, 0, 0, wire.missing_section(9, 1, dig)),
        T.LOGACK: (T.LOGACK, 0, 9, 1, 0, 1000, dig),
        T.JOIN: (T.JOIN, 0, 7, 3, 0, 10**18, member),
        T.LEAVE: (T.LEAVE, 0, 7, 3, 0, 10**18 + 1, b""),
        T.MEMBERS: (T.MEMBERS, wire.F_PUSH, 7, 3, 0, 0, member * 2),
        T.STABILITY: (T.STABILITY, 0, 7, 3, 0, 0, wire.stability_body(4, [(9, 1, 990)])),
        T.GAPNOTE: (T.GAPNOTE, wire.F_LOST, 7, 3, 0, 0, wire.missing_section(9, 1, dig)),
        T.PURGED: (T.PURGED, 0, 9, 1, 0, 0, wire.purged_pairs([(5, 8)])),
        T.WINDOW: (T.WINDOW, 0, 9, 1, 64, 500, b""),
        T.SEQBLOCK: (T.SEQBLOCK, wire.F_REPLY, 9, 1, 1 << 20, 1 << 21, b""),
        T.PING: (T.PING, 0, 7, 3, 0, 2**64 - 1, struct.pack("<q", 5)),
        T.PONG: (T.PONG, 0, 7, 3, 0, 2**64 - 1, struct.pack("<q", 5)),
        T.ATOMIC: (T.ATOMIC, wire.F_VOTERS, 9, 1, wire.ATOMIC_YES, 12, wire.voter_ids([3, 4, 7])),
    }
    for t, m in ms.items():
        with open(os.path.join(directory, f"{t.name.lower()}.bin"), "wb") as f:
            f.write(wire.datagram([m]))
    everything = bytearray(wire.datagram(list(ms.values())))
    everything[3] |= wire.DGF_MAC
    struct.pack_into("<H", everything, 18, 16)
    with open(os.path.join(directory, "all_mac.bin"), "wb") as f:
        f.write(bytes(everything) + bytes(range(16)))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--seeds":
        _load()
        seeds(sys.argv[2])
        return
    for f in (TestOneInput, read_body, read_sections, read_missing, reencode):
        atheris.instrument_func(f)
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
