"""A logger acknowledges what a group commit covers as soon as that sync
completed -- not at the next fsync_interval tick -- and never before (issue
13: a sender runs at most send_window ahead of its acknowledgments, so the
logger's acknowledgment cycle divides its rate)."""
from groups import Group

NS = 1_000_000_000


def test_ack_follows_the_completed_sync_not_the_next_tick(tmp_path):
    # Long intervals on the in-memory network (virtual time): the first
    # sync that covers the messages starts at the tick at 10 s; the next
    # tick is at 20 s.  main acknowledged at that next tick.
    g = Group(3, senders=[1], loggers=[3], tmp_path=tmp_path, fsync="interval", fsync_interval=10.0,
              logger_ack_interval=10.0)
    t0 = g.net.now
    g.publish_stream(50, per_tick=10)
    sender = g.E[1].node
    assert g.run_until_complete(timeout=5)
    g.net.run_until(t0 + int(9.9 * NS))
    assert sender.acked == 0                    # no sync has covered them yet: nothing acknowledged
    assert g.net.run_until_true(lambda net: sender.acked == 50, timeout=15)
    took = (g.net.now - t0) / NS
    assert 10.0 <= took < 19.0, took            # after the sync at 10 s completed, before the tick at 20 s
    assert g.E[3].logger.log.synced_epoch() >= 1
