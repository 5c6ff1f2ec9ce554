"""The engine fuzzer (fuzz/fuzz_engine.py): its datagrams pass the MAC and
the decoder and reach every message type's handler, its checks catch a
broken invariant, and a short seeded run finds nothing -- in-process on the
normal build, and as a subprocess on a build of the core under ASan+UBSan
(fuzz/sanitized.py), which is the CI budget for memory safety of node.c,
serve.c, wire.c and the rest of the data plane under valid, keyed,
hostile input."""
import importlib.util
import os
import struct
import subprocess
import sys

import pytest

from rpbcast import Config, MemberSpec
from rpbcast.core import wire
from rpbcast.protocol.engine import Engine

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T = wire.MsgType
MS = 1_000_000
SANITIZED_SECONDS = 40      # the CI budget of the sanitized run (the build comes on top)
# fifo-srb runs with the default max_gap (2^32) since the FIFO delivery
# queue no longer allocates by sequence range (test_fuzz_findings.py);
# fifo-srb-gap runs the same code with max_gap 4096.
CI_VARIANTS = "plain,atomic,fifo-srb,fifo-srb-gap"


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, "fuzz", name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


fe = load("fuzz_engine")


def keyed_engine(tmp_path, node_id=2):
    kf = fe.key_file(str(tmp_path))
    specs = [MemberSpec(1, 1), MemberSpec(2, 2)]
    return Engine(Config(node_id=node_id, members=specs, incarnation=1, key_file=kf), 0)


def test_the_fuzzers_seal_is_the_cores(tmp_path):
    e = keyed_engine(tmp_path)
    s = fe.Sealer(counter0=5)
    d = s.seal(wire.datagram([(T.DATA, 0, 1, 1, 0, 0, b"hello")], group=1, source=1, source_inc=1))
    h, _ = wire.parse(d)
    assert h.dflags & wire.DGF_MAC and h.mac_len == 25 and d[-25] == fe.KEY_ID
    assert struct.unpack_from("<Q", d, len(d) - 24)[0] == 5
    assert e.receive_datagram(d, 1, MS) == wire.Reason.OK
    assert [m.payload for m in e.recv(now=MS)] == [b"hello"]
    bad = bytearray(s.seal(wire.datagram([(T.DATA, 0, 1, 1, 0, 1, b"x")], group=1, source=1, source_inc=1)))
    bad[30] ^= 1
    assert e.receive_datagram(bytes(bad), 1, MS) == wire.Reason.AUTH
    assert e.node.rx_reasons() == {"auth": 1}


def test_a_short_run_reaches_every_message_type_and_keeps_the_genuine_stream(tmp_path, capsys):
    h = fe.run_episode(1, 0, batches=24, settle=2.0, touch_genuine=False, artifacts=None, out=sys.stdout)
    assert h.findings == []
    # every type got past the MAC and the decoder into a node
    assert set(h.reached) >= {t.name.lower() for t in T}, h.reached
    assert sum(h.reached.values()) > 24 * h.batch // 2
    # the genuine stream was published and delivered exactly once everywhere
    assert len(h.published) > 50
    for cnt in h.got.values():
        assert set(cnt) == set(h.published) and set(cnt.values()) == {1}
    assert "types never accepted none" in capsys.readouterr().out


def test_the_same_seed_injects_the_same_datagrams(tmp_path):
    def first(seed):
        g = fe.Generator(fe.Values(__import__("random").Random(seed), False), group=1)
        return [g.datagram() for _ in range(50)]
    assert first(7) == first(7) != first(8)


def test_the_checks_catch_what_they_guard(tmp_path):
    """Each invariant fails when it is broken on purpose: an exception out
    of a handler, a forged genuine message delivered, a genuine message
    lost, a stream cap exceeded."""
    h = fe.Harness(3, str(tmp_path), streams_cap=0)
    for _ in range(3):
        h.step(inject=False)
    # a forged DATA of the genuine stream, ahead of it, from a key holder
    # speaking in the sender's name (one group key: the MAC cannot tell)
    seq = h.pub.node.next_seq + 2
    forged = h.sealer.seal(wire.datagram([(T.DATA, 0, fe.GENUINE, 1, 0, seq, b"forged")],
                                         group=1, source=fe.GENUINE, source_inc=1))
    for dest in (2, 3):
        h.net.at(h.net.now + 1000, lambda n, dest=dest: n.engines[dest].receive_datagram(forged, 3, n.now))
    # an exception escaping the engine (a raising handler no longer can:
    # the engine's dispatch guard counts it as handler_error)
    e2 = h.E[2]
    leave = h.sealer.seal(wire.datagram([(T.LEAVE, 0, 3, 1, 0, 5, b"")], group=1, source=3, source_inc=1))

    def escaping(data, src, now):
        e2.receive_datagram(data, src, now)
        raise ZeroDivisionError("escaped")
    h.net.at(h.net.now + 2000, lambda n: h.guard("receive_datagram", [], escaping, leave, 3, n.now))
    for _ in range(5):
        h.step(inject=False)
    h.settle(2.0)
    kinds = {k for k, _, _ in h.findings}
    assert {"exception", "forged payload", "lost", "memory"} <= kinds, h.findings


def test_a_publisher_blocked_for_good_is_a_finding(tmp_path):
    h = fe.Harness(3, str(tmp_path))
    for _ in range(3):
        h.step(inject=False)
    assert h.published

    def refuse(*a, **kw):
        raise BlockingIOError("flow control")
    h.pub.publish = refuse
    h.settle(2.0)
    assert [k for k, _, _ in h.findings] == ["publish blocked"]


def test_the_fuzzer_finds_nothing_in_a_seeded_run(tmp_path, capsys):
    found = fe.run(12345, seconds=8, artifacts=str(tmp_path / "art"), episodes=None, batches=30,
                   variants=CI_VARIANTS.split(","))
    out = capsys.readouterr().out
    assert "findings: 0" in out and found == [], out


def sanitizer_runtime():
    sys.path.insert(0, os.path.join(REPO, "fuzz"))
    try:
        return load("sanitized").runtime_libs()
    finally:
        sys.path.pop(0)


@pytest.mark.timeout(900)
@pytest.mark.skipif(sanitizer_runtime() is None, reason="gcc has no ASan/UBSan runtime")
def test_the_engine_fuzzer_under_asan_and_ubsan(tmp_path):
    """The C core built with -fsanitize=address,undefined; a seeded run of
    SANITIZED_SECONDS.  Any sanitizer report aborts the run (non-zero
    exit, report on stderr); any finding is a failure too."""
    seed = 20261124
    work = os.environ.get("FUZZ_WORK", os.path.join(REPO, "build", "fuzz"))
    r = subprocess.run([sys.executable, os.path.join(REPO, "fuzz", "sanitized.py"), "--work", work,
                        "fuzz_engine.py", "--seed", str(seed), "--seconds", str(SANITIZED_SECONDS), "--batches", "30",
                        "--variants", CI_VARIANTS,
                        "--artifacts", str(tmp_path / "artifacts")],
                       capture_output=True, text=True, timeout=880)
    sys.stdout.write(r.stdout[-3000:])
    report = r.stderr[-6000:]
    assert "AddressSanitizer" not in r.stderr and "runtime error:" not in r.stderr, report
    assert r.returncode == 0, report + r.stdout[-3000:]
    assert f"seed {seed}" in r.stdout and "findings: 0" in r.stdout
    core = r.stdout.split(", core ", 1)[1].splitlines()[0]
    assert os.path.basename(os.path.dirname(os.path.dirname(core))).startswith("asan-"), core  # the sanitized one
    assert "episode 0 " in r.stdout and "types never accepted none" in r.stdout
