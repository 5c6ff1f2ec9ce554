"""A logger whose log was damaged on disk (issue 14): after a restart it
reports the damage in its counters, serves every intact record, and
answers requests for the damaged ids with a GAPNOTE (lost) -- the
requester is told, instead of asking into silence forever."""
import glob
import os
import struct

from groups import Group
from rpbcast.config import Config, MemberSpec

SEG_HDR = 16
HDR = 40


def flip_first_record_payload(log_dir):
    """Flip a payload byte of the first record of the oldest segment;
    returns that record's (seq, count)."""
    path = sorted(glob.glob(os.path.join(log_dir, "seg-*.rplog")))[0]
    with open(path, "r+b") as f:
        head = f.read(SEG_HDR + HDR)
        count = struct.unpack_from("<I", head, SEG_HDR + 12)[0]
        seq = struct.unpack_from("<Q", head, SEG_HDR + 24)[0]
        f.seek(SEG_HDR + HDR + 3)
        b = f.read(1)
        f.seek(SEG_HDR + HDR + 3)
        f.write(bytes([b[0] ^ 0x5A]))
    return seq, count


def test_damaged_ids_are_counted_and_answered_with_a_gapnote(tmp_path):
    g = Group(4, senders=[1], loggers=[4], tmp_path=tmp_path, fsync="always")
    g.publish_stream(200, per_tick=10)
    assert g.run_until_complete(timeout=5)
    g.net.run(0.5)
    assert g.E[1].node.acked == 200
    g.net.crash(4)
    log = g.E[4].logger.log
    del g.E[4]
    log.close()
    seq, count = flip_first_record_payload(g.config(4).log_dir)
    assert 1 <= count < 200
    e = g.start(4)
    st = e.counters()                     # what Node.stats() and `rpbcast stat` show
    assert st["log_damaged_records"] == 1 and st["log_damaged_ids"] == count
    assert st["log_truncated_bytes"] == 0
    # A new member that wants everything asks the restarted logger.
    late = g.net.add(Config(node_id=7, incarnation=1, members=g.specs + [MemberSpec(7, 7)],
                            catch_up=True, gossip_interval=0.05))
    slot = late.node.peer(1, 1, 0)
    late.node.heartbeat(slot, 199, False, g.net.now)
    late.node.to_logger_phase(slot, 0, 199)
    events = []

    def done(net):
        late.recv()
        while (ev := late.next_event()) is not None:
            events.append(ev)
        return late.node.peer_missing_count(slot) == 0

    assert g.net.run_until_true(done, timeout=5)
    lost = {q for ev in events if ev[0] == "lost" and ev[1:3] == (1, 1) for q in range(ev[3], ev[4] + 1)}
    assert lost == set(range(seq, seq + count))       # told, not left asking
    assert late.counters()["repairs_logger"] == 200 - count   # everything intact was served


def test_rpbcast_stat_prints_log_damage(capsys):
    from rpbcast.tools.stats import render
    st = {"node_id": 4, "role": "logger", "incarnation": 1, "addr": "x", "time": 1.0, "store_entries": 0,
          "store_bytes": 0, "gossip_buffer_entries": 0, "log_damaged_records": 1, "log_damaged_ids": 37,
          "log_truncated_bytes": 0, "catchup_pending": 5}
    render(st, None)
    assert "1 damaged records (37 ids lost)" in capsys.readouterr().out
