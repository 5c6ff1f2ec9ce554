"""The two ways into the C data plane -- the node face (rpbcast.core.node.Node,
what the engine and the simulator publish through) and the UDP driver's
(rpbcast.drivers.udp.Transport, what rpbcast.Node publishes through, under
its loop lock) -- check their arguments and translate the core's errors in
one place: the same bad input raises the same error on both.

Before they shared that code the driver path published label 2**64-1 as an
unlabelled message instead of refusing it, and turned a logger's failed log
write (RP_EIO) into MemoryError instead of OSError."""
import shutil

import numpy as np
import pytest

from rpbcast import Config, MemberSpec
from rpbcast.api import Node as ApiNode
from rpbcast.core.logstore import LogStore
from rpbcast.core.node import Node
from ports import free_port

pytestmark = pytest.mark.timeout(60)


def api_node(**kw):
    port = free_port()
    addr = f"127.0.0.1:{port}"
    cfg = dict(node_id=1, bind=addr, members=[MemberSpec(1, addr, "member")], transport="unicast")
    cfg.update(kw)
    return ApiNode(Config(**cfg), start=False)


def core_node(**kw):
    n = Node(1, 1, 1, mtu=Config().mtu, **kw)
    n.hold_send = False
    return n


def error_of(call):
    try:
        call()
    except Exception as e:          # noqa: BLE001 -- the error is what is compared
        return type(e), str(e)
    return None


@pytest.fixture
def both():
    a = api_node()
    try:
        yield core_node(), a
    finally:
        a.close()


def same_error(core_call, api_call):
    e = error_of(core_call)
    assert e is not None
    assert error_of(api_call) == e
    return e[0]


def test_reserved_label(both):
    core, api = both
    assert same_error(lambda: core.publish(b"x", label=2**64 - 1),
                      lambda: api.publish(b"x", label=2**64 - 1)) is ValueError
    assert api.transport.stats()["sent"] == 0       # nothing went out unlabelled


def test_negative_label(both):
    core, api = both
    assert same_error(lambda: core.publish(b"x", label=-1),
                      lambda: api.publish(b"x", label=-1)) is OverflowError


def test_oversize(both):
    """Larger than a datagram is fragmented now (tests/test_fragments.py);
    larger than the message cap is the error, on both paths."""
    core, api = both
    big = bytes(64 << 20)                     # the core's cap is 64 MiB; the api's is smaller
    for label in (None, 7):
        with pytest.raises(ValueError, match="max_message_size"):
            core.publish(big + b"x", label=label)
        with pytest.raises(ValueError, match="max_message_size"):
            api.publish(big, label=label)


def test_batch_arguments(both):
    core, api = both
    pay = np.zeros(10, np.uint8)
    lens = np.array([6, 6], np.uint32)
    assert same_error(lambda: core.publish_batch(pay, lens),
                      lambda: api.transport.publish_batch(pay, lens)) is ValueError
    lens = np.array([5, 5], np.uint32)
    labels = np.array([1], np.uint64)
    assert same_error(lambda: core.publish_batch(pay, lens, labels),
                      lambda: api.transport.publish_batch(pay, lens, labels)) is ValueError
    # NOLABEL inside a batch means "this one has no label", on both paths.
    labels = np.array([2**64 - 1, 3], np.uint64)
    assert core.publish_batch(pay, lens, labels) == api.publish_batch(pay, lens, labels) == 2


def test_back_pressure():
    core = core_node(srb_w=2, fifo=True)
    api = api_node(delivery="fifo", srb_window=2)
    try:
        for _ in range(2):
            core.publish(b"x")
            api.publish(b"x")
        assert same_error(lambda: core.publish(b"x"), lambda: api.publish(b"x")) is BlockingIOError
    finally:
        api.close()


def _failing_log(path):
    """A log whose next segment cannot be created: its directory is gone."""
    log = LogStore(path, segment_bytes=1024)
    shutil.rmtree(path)
    return log


def test_log_write_refused(tmp_path):
    core = core_node()
    core.attach_log(_failing_log(tmp_path / "core"))
    api = api_node()
    try:
        api.engine.node.attach_log(_failing_log(tmp_path / "api"))
        seen = None
        for _ in range(100):
            e = error_of(lambda: core.publish(bytes(200)))
            assert error_of(lambda: api.publish(bytes(200))) == e
            if e is not None:
                seen = e[0]
                break
        assert seen is OSError
        assert core.counters()["log_errors"] == api.engine.node.counters()["log_errors"] == 1
    finally:
        api.close()


def test_recv_batch_paths_agree():
    core = core_node(deliver_own=True)
    api = api_node(deliver_own=True)
    try:
        for n in (core, api):
            n.publish(b"abc", label=5)
            n.publish(b"de")
        a = core.recv_batch(4, bytearray(64))
        b = api.transport.recv_batch(4, bytearray(64))
        assert a[0] == b[0] == 2
        for x, y in zip(a[1:], b[1:]):
            assert x.dtype == y.dtype
        for col in (1, 3, 4, 6, 7):     # all but incarnations and receive times
            assert list(a[col]) == list(b[col])
        assert [len(c) for c in core.recv_batch(0, bytearray(0))[1:]] == [0] * 7
        assert [len(c) for c in api.transport.recv_batch(0, bytearray(0))[1:]] == [0] * 7
    finally:
        api.close()
