"""The logger at line rate: what the sender's store holds at the end of a
stress run once the logger has everything."""

import pytest
from stressrun import stress

pytestmark = pytest.mark.timeout(300)


@pytest.mark.netns
def test_sender_store_holds_nothing_for_the_logger_at_the_end(tmp_path):
    # A rate the logger keeps up with: its acknowledgments trail the
    # stream by a sync and an ack interval.  "At the end" used to be the
    # sender's last progress report, taken while it was still sending, so
    # the report showed millions of messages held; at the end the logger
    # has acknowledged everything and only the gossip buffer may hold any.
    rc, s = stress("--receivers", "2", "--loggers", "1", "--rate", "200000", "--duration", "1",
                   tmp_path=tmp_path)
    assert rc == 0 and s["exactly_once"], s["problems"]
    sender = s["buffer_end"]["1"]
    assert sender["store_entries"] <= sender["gossip_entries"], sender
    # every node reports its end, the logger included
    assert set(s["buffer_end"]) == {"1", "2", "3", "4"}
