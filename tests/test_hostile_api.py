"""The API edges of issue 14: what an application gets wrong gets a clear
error, and nothing is half-done silently."""
import socket
import subprocess
import sys

import pytest

from rpbcast import Config, ConfigError, MemberSpec
from rpbcast.api import Node
from ports import free_port

pytestmark = pytest.mark.timeout(60)


def unicast_node(port=None):
    port = port or free_port()
    return Node(Config(node_id=1, bind=f"127.0.0.1:{port}", transport="unicast",
                       members=[MemberSpec(1, f"127.0.0.1:{port}")])), port


def test_label_all_ones_is_refused_not_taken_for_no_label():
    # (publish already refused it on main; in a batch 2**64-1 is the
    # documented per-message "no label", tests/test_publish_paths.py)
    n, _ = unicast_node()
    try:
        with pytest.raises(ValueError, match="2\\*\\*64-1"):
            n.publish(b"x", label=2**64 - 1)
        assert n.stats()["sent"] == 0
    finally:
        n.close()


def test_publish_batch_raises_at_an_oversize_message_saying_how_many_went_out():
    n, _ = unicast_node()
    try:
        big = n.config.message_cap + 1        # larger than a datagram is fragmented; above the cap is refused
        with pytest.raises(ValueError, match="3 of 5 messages were published") as e:
            n.publish_batch([b"a", b"b", b"c", b"x" * big, b"d"])
        assert "message 3" in str(e.value) and str(big) in str(e.value) and "max_message_size" in str(e.value)
        assert n.stats()["sent"] == 3
    finally:
        n.close()


def test_close_releases_the_port_and_later_calls_raise():
    n, port = unicast_node()
    n.close()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", port))               # the port is free again
    s.close()
    for call in (lambda: n.publish(b"x"), lambda: n.publish_batch([b"x"]), lambda: n.recv_batch(),
                 lambda: n.receive(timeout=0)):
        with pytest.raises(RuntimeError, match="closed"):
            call()
    n.close()                                 # twice is fine


@pytest.mark.parametrize("kw, key", [
    (dict(mtu="1472"), "mtu"),
    (dict(store_bytes="big"), "store_bytes"),
    (dict(max_gap=1.5), "max_gap"),
    (dict(repair_rate="fast"), "repair_rate"),
    (dict(members=[MemberSpec(2**40, "127.0.0.1:9")]), "node_id"),
    (dict(members=[MemberSpec(0, "127.0.0.1:9")]), "node_id"),
    (dict(members=[MemberSpec("2", "127.0.0.1:9")]), "node_id"),
    (dict(members=[MemberSpec(2, "127.0.0.1:9", rank="x")]), "rank"),
])
def test_wrong_types_are_config_errors_naming_the_key(kw, key):
    with pytest.raises(ConfigError, match=key):
        Config(**kw)


def test_a_member_entry_with_an_unknown_key_is_a_config_error():
    with pytest.raises(ConfigError, match="colour"):
        Config.from_dict({"members": [{"node_id": 2, "addr": "127.0.0.1:9", "colour": "red"}]})
    with pytest.raises(ConfigError, match="members"):
        Config.from_dict({"members": [{"addr": "127.0.0.1:9"}]})
    with pytest.raises(ConfigError, match="members"):
        Config.from_dict({"members": ["127.0.0.1:9"]})


def test_the_cli_prints_a_log_error_as_one_line_and_exits_non_zero(tmp_path):
    log_dir = tmp_path / "log"
    log_dir.write_text("not a directory")     # the log cannot be opened
    port = free_port()
    r = subprocess.run([sys.executable, "-m", "rpbcast", "logger", "--node-id", "9", "--dir", str(log_dir),
                        "--bind", f"127.0.0.1:{port}", "--transport", "unicast"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr and "log" in lines[0]
