"""The MAC's direct path (csrc/gcmfast.c, docs/performance.md "MAC"): where
the CPU has AES-NI, VAES, VPCLMULQDQ and AVX-512, a keyed node seals and
verifies without OpenSSL's EVP layer.  It must compute exactly what
OpenSSL computes -- a datagram sealed on one path verifies on the other,
MAC only and encrypted, at every length -- and keep every guarantee of the
MAC: one tag per datagram (a corrupted datagram in the middle of a run is
dropped and counted, its neighbours pass), both keys of a roll-over."""
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck

from rpbcast import Config, MemberSpec
from rpbcast.core import wire
from rpbcast.protocol.engine import Engine

KEY = bytes(range(16))
NEW = bytes(range(100, 116))


def cpu_has_direct_path():
    try:
        flags = next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split()
    except (OSError, StopIteration):
        return False
    return {"aes", "pclmulqdq", "avx2", "avx512f", "avx512bw", "avx512vl", "vaes",
            "vpclmulqdq"} <= set(flags)


DIRECT = cpu_has_direct_path()
needs_direct = pytest.mark.skipif(not DIRECT, reason="this CPU lacks VAES/VPCLMULQDQ/AVX-512")


def write_keys(path, *keys):
    path.write_text("".join(f"{kid} {k.hex()}\n" for kid, k in keys))
    return str(path)


def engine(tmp_path, i, keys=((1, KEY),), encrypt=False, fast=True):
    specs = [MemberSpec(1, 1), MemberSpec(2, 2)]
    kf = write_keys(tmp_path / f"keys{i}-{len(keys)}-{keys[0][0]}", *keys)
    e = Engine(Config(node_id=i, members=specs, incarnation=1, key_file=kf, encrypt=encrypt), 0,
               mac_counter0=1000 * i)
    assert e.node.set_auth_fast(fast) == (fast and DIRECT)
    return e


def published(e, payloads, now=1000):
    for p in payloads:
        e.publish(p, now=now)
    e.handle_timer(now + 1)
    return [d for _, d in e.datagrams_to_send()]


def test_the_direct_path_is_used_exactly_where_the_cpu_has_it(tmp_path):
    e = engine(tmp_path, 1)
    assert e.node.auth_fast == DIRECT
    assert e.node.auth_stats()["mac_direct"] == DIRECT
    assert e.counters()["mac_direct"] == DIRECT          # in Node.stats() too
    assert e.node.set_auth_fast(False) is False and e.node.auth_fast is False
    assert e.node.set_auth_fast(True) == DIRECT


@needs_direct
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(0, 1400), min_size=1, max_size=40),
       encrypt=st.booleans(), sender_fast=st.booleans())
def test_a_datagram_sealed_on_one_path_verifies_on_the_other(tmp_path, sizes, encrypt, sender_fast):
    a = engine(tmp_path, 1, encrypt=encrypt, fast=sender_fast)
    b = engine(tmp_path, 2, fast=not sender_fast)
    payloads = [bytes([k % 251]) * s for k, s in enumerate(sizes)]
    out = published(a, payloads)
    for d in out:
        assert bool(d[3] & wire.DGF_ENC) == encrypt              # the header's dflags
        assert b.receive_datagram(d, 1, 2000) != wire.Reason.AUTH
    assert b.node.rx_reasons() == {}
    got = sorted(b.recv(now=3000), key=lambda m: m.seq)
    assert [m.payload for m in got] == payloads
    # and any flipped bit fails on both paths
    for d in out[:3]:
        bad = bytearray(d)
        bad[(len(bad) * 7) // 11] ^= 0x10
        assert b.receive_datagram(bytes(bad), 1, 2000) == wire.Reason.AUTH
        b.node.set_auth_fast(sender_fast)
        assert b.receive_datagram(bytes(bad), 1, 2000) == wire.Reason.AUTH
        b.node.set_auth_fast(not sender_fast)


@pytest.mark.parametrize("encrypt", [False, True])
@pytest.mark.parametrize("fast", [True, False])
def test_a_corrupted_datagram_in_the_middle_of_a_run_is_dropped_its_neighbours_pass(tmp_path, fast,
                                                                                    encrypt):
    """A run of equal-size datagrams (what the driver hands to one GSO
    send and the receiver gets back as one GRO buffer): each carries its
    own tag and is verified on its own."""
    a = engine(tmp_path, 1, encrypt=encrypt, fast=fast)
    b = engine(tmp_path, 2, fast=fast)
    payloads = [b"%05d" % k + b"x" * 59 for k in range(16 * 12)]
    out = published(a, payloads)
    assert len(out) >= 10 and len({len(d) for d in out[:-1]}) == 1      # one GSO-able run
    mid = len(out) // 2
    bad = bytearray(out[mid])
    bad[100] ^= 1
    run = out[:mid] + [bytes(bad)] + out[mid + 1:]
    reasons = [b.receive_datagram(d, 1, 2000) for d in run]
    assert reasons[mid] == wire.Reason.AUTH
    assert all(r != wire.Reason.AUTH for k, r in enumerate(reasons) if k != mid)
    assert b.node.rx_reasons() == {"auth": 1}
    got = {m.payload for m in b.recv(now=3000)}
    lost = [k for k, p in enumerate(payloads) if p not in got]
    assert lost and len(lost) <= 16 and lost == list(range(lost[0], lost[-1] + 1))   # one datagram's
    if not encrypt:
        _, msgs = wire.parse(out[mid])
        assert {payloads[k] for k in lost} == {bytes(m.body) for m in msgs}


@needs_direct
def test_the_direct_path_survives_a_key_roll_over(tmp_path):
    """Both keys of a roll-over get their own precomputed key; a node that
    rolls over installs new ones and still speaks to both generations."""
    old = engine(tmp_path, 1, keys=((1, KEY),))
    both = engine(tmp_path, 2, keys=((2, NEW), (1, KEY)))
    assert old.node.auth_fast and both.node.auth_fast
    for d in published(old, [b"old%d" % k for k in range(40)]):
        assert both.receive_datagram(d, 1, 2000) != wire.Reason.AUTH     # verified under key 1
    assert len(both.recv(now=2500)) == 40
    # the old node rolls over: new contexts, same node
    old.node.set_auth([(2, NEW), (1, KEY)], 10 ** 12)
    assert old.node.auth_fast
    for d in published(both, [b"new%d" % k for k in range(40)], now=3000):
        assert d[-25] == 2
        assert old.receive_datagram(d, 2, 4000) != wire.Reason.AUTH      # verified under key 2
    assert len(old.recv(now=4500)) == 40
    for d in published(old, [b"again%d" % k for k in range(40)], now=5000):
        assert both.receive_datagram(d, 1, 6000) != wire.Reason.AUTH
    assert len(both.recv(now=6500)) == 40
    assert old.node.rx_reasons() == {} and both.node.rx_reasons() == {}
    # a node that only has the new key does not accept the old one's tags
    only_new = engine(tmp_path, 2, keys=((2, NEW),))
    for d in published(engine(tmp_path, 1, keys=((1, KEY),)), [b"stale"], now=7000):
        assert only_new.receive_datagram(d, 1, 8000) == wire.Reason.AUTH


def test_mac_impl_openssl_keeps_every_mac_in_the_library(tmp_path):
    """Config.mac_impl = "openssl": a deployment that must use the
    library's code only gets EVP for every datagram, and still talks to
    nodes on the direct path."""
    from rpbcast.config import ConfigError
    specs = [MemberSpec(1, 1), MemberSpec(2, 2)]
    kf = write_keys(tmp_path / "keys", (1, KEY))
    lib = Engine(Config(node_id=1, members=specs, incarnation=1, key_file=kf, mac_impl="openssl"), 0,
                 mac_counter0=1000)
    auto = Engine(Config(node_id=2, members=specs, incarnation=1, key_file=kf), 0, mac_counter0=2000)
    assert lib.counters()["mac_direct"] == 0
    assert auto.counters()["mac_direct"] == DIRECT
    for d in published(lib, [b"from-the-library-%d" % k for k in range(5)]):
        auto.receive_datagram(d, 1, 2000)
    got = [bytes(m.payload) for m in auto.recv(now=2001)]
    assert got == [b"from-the-library-%d" % k for k in range(5)]
    with pytest.raises(ConfigError, match="mac_impl"):
        Config(node_id=1, key_file=kf, mac_impl="fast")
