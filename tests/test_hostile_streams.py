"""A peer's message never raises into handle_timer: 5,000 streams learnt
from HBLIST entries (issue 14: past 4,095 streams every gossip raised
"section longer than 65535" and aborted the timer -- a logger stopped
syncing and acknowledging)."""
import pytest

from rpbcast import Config, MemberSpec
from rpbcast.core import wire
from rpbcast.protocol.engine import Engine

T = wire.MsgType
MS = 1_000_000


@pytest.mark.parametrize("role", ["member", "logger"])
def test_five_thousand_streams_from_hblists_never_raise_into_handle_timer(tmp_path, role):
    specs = [MemberSpec(1, 1), MemberSpec(2, 2), MemberSpec(3, 3, "logger")]
    kw = dict(role="logger", log_dir=str(tmp_path / "log")) if role == "logger" else {}
    node_id = 3 if role == "logger" else 1
    # (max_streams above the default 4,096 and a quota per node above the
    # default 8: the point is a node that knows 5,000)
    if hasattr(Config(), "max_streams_per_node"):
        kw["max_streams_per_node"] = 8192
    e = Engine(Config(node_id=node_id, members=specs, incarnation=1, gossip_interval=0.01, max_streams=8192,
                      **kw), 0)
    # 5,000 streams (member 2 in incarnations 1000.., each idle at seq 5; streams of
    # non-members are refused) in HBLIST messages from member 2
    entries = [(2, 1000 + k, 5) for k in range(5000)]
    now = MS
    for k in range(0, len(entries), 2500):
        d = wire.datagram([(T.HBLIST, 0, 2, 1, 0, 0, wire.hb_entries(entries[k:k + 2500]))],
                          group=1, source=2, source_inc=1)
        e.receive_datagram(d, 2, now)
    assert e.node.npeers >= 5000
    sent = 0
    for step in range(60):                    # several gossip rounds, logger phases, reports
        now += 5 * MS
        e.handle_timer(now)
        for dest, d in e.datagrams_to_send():
            assert len(d) <= e.cfg.mtu + 25
            wire.parse(d)                     # everything sent is well-formed
            sent += 1
    assert sent > 0
