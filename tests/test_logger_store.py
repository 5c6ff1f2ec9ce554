"""The logger keeps what it logs in its log only (issue 13, the logger at
line rate): no second copy in its message store -- the copy, the first
touch of the store's pages and their collection were about a third of its
receive work -- and repairs are read back from the log's index.  At line
rate the sender is held to its receivers as well as to the logger, so a
logger that only appends cannot let it outrun them."""
import pytest
from groups import Group
from stressrun import stress

from rpbcast.config import Config, MemberSpec


def test_the_logger_holds_nothing_in_its_store_and_serves_from_its_log(tmp_path):
    g = Group(4, senders=[1], loggers=[4], tmp_path=tmp_path, fsync="always")
    g.publish_stream(300, per_tick=10)
    assert g.run_until_complete(timeout=5)
    g.net.run(0.5)
    assert g.E[1].node.acked == 300                       # durable at the logger: acknowledged
    logger = g.E[4].counters()
    assert logger["logged"] == 300
    assert logger["store_entries"] == 0, logger["store_entries"]    # logged, not cached
    # A member that wants everything asks the logger: every id comes from the log.
    late = g.net.add(Config(node_id=7, incarnation=1, members=g.specs + [MemberSpec(7, 7)],
                            catch_up=True, gossip_interval=0.05))
    slot = late.node.peer(1, 1, 0)
    late.node.heartbeat(slot, 299, False, g.net.now)
    late.node.to_logger_phase(slot, 0, 299)

    def done(net):
        late.recv()
        return late.node.peer_missing_count(slot) == 0

    assert g.net.run_until_true(done, timeout=5)
    assert late.counters()["repairs_logger"] == 300
    assert g.E[4].counters()["served_from_log"] >= 300
    assert g.E[4].counters()["store_entries"] == 0


@pytest.mark.netns
@pytest.mark.timeout(300)
def test_at_line_rate_the_logger_store_stays_empty_and_nobody_is_outrun(tmp_path):
    # The default stress (1 sender, 2 receivers, 1 logger, as fast as it
    # goes), short.  main's logger cached every message it logged (its
    # store peaked at hundreds of thousands of entries) and held the
    # sender to the logger alone.
    rc, s = stress("--duration", "1.5", "--timeout", "30", tmp_path=tmp_path, timeout=200)
    assert rc == 0 and s["exactly_once"], s["problems"]
    logger = str(s["loggers"] + s["receivers"] + s["senders"])  # ids: senders, receivers, then loggers
    assert s["buffer_peaks"].get(logger, {}).get("store_entries", 0) == 0, s["buffer_peaks"]
    assert s["buffer_end"][logger]["store_entries"] == 0, s["buffer_end"]
    assert s["flow_control"] == "receivers"          # held to the receivers and the logger
    # the sender's store at the end is at most its gossip buffer's floor
    sender = s["buffer_end"]["1"]
    assert sender["store_entries"] <= sender["gossip_entries"], sender
