"""The MAC's engines (csrc/auth.h, docs/security.md "Who computes it"): one
AES-128-GCM/GMAC computed by intel-ipsec-mb (csrc/gcmlib.c, the default
where the build has it and the CPU runs it in hardware) or OpenSSL's EVP
(the fallback, everywhere).  They must compute exactly the same thing -- a
datagram sealed by one verifies on the other, MAC only and encrypted, at
every length -- and keep every guarantee of the MAC: one tag per datagram
(a corrupted datagram in the middle of a run is dropped and counted, its
neighbours pass), both keys of a roll-over."""
import itertools
import os

import pytest
from hypothesis import given, settings, strategies as st, HealthCheck

from rpbcast import Config, MemberSpec
from rpbcast.config import ConfigError
from rpbcast.core import wire
from rpbcast.protocol.engine import Engine

KEY = bytes(range(16))
NEW = bytes(range(100, 116))


def cpu_flags():
    try:
        return set(next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split())
    except (OSError, StopIteration):
        return set()


# intel-ipsec-mb: built in when its header was there (setup.py, unless
# RPBCAST_NO_IPSECMB=1 at build and test time), run only on hardware AES and
# carry-less multiply
IPSECMB = os.path.exists("/usr/include/intel-ipsec-mb.h") and {"aes", "pclmulqdq"} <= cpu_flags() \
    and os.environ.get("RPBCAST_NO_IPSECMB") != "1"
IMPLS = ["openssl"] + (["ipsec-mb"] if IPSECMB else [])


def write_keys(path, *keys):
    path.write_text("".join(f"{kid} {k.hex()}\n" for kid, k in keys))
    return str(path)


def engine(tmp_path, i, keys=((1, KEY),), encrypt=False, impl="auto"):
    specs = [MemberSpec(1, 1), MemberSpec(2, 2)]
    kf = write_keys(tmp_path / f"keys{i}-{len(keys)}-{keys[0][0]}", *keys)
    e = Engine(Config(node_id=i, members=specs, incarnation=1, key_file=kf, encrypt=encrypt,
                      mac_impl=impl), 0, mac_counter0=1000 * i)
    assert impl == "auto" or e.node.auth_impl == impl
    return e


def published(e, payloads, now=1000):
    for p in payloads:
        e.publish(p, now=now)
    e.handle_timer(now + 1)
    return [d for _, d in e.datagrams_to_send()]


def test_auto_runs_the_library_where_it_can_and_stats_say_which(tmp_path):
    e = engine(tmp_path, 1)
    want = "ipsec-mb" if IPSECMB else "openssl"
    assert e.node.auth_impl == want
    assert e.node.auth_stats()["mac_impl"] == want
    assert e.counters()["mac_impl"] == want          # in Node.stats() too
    if IPSECMB:                                      # the library's version and code path
        assert e.counters()["mac_lib"].split()[0].count(".") == 2
    assert set(e.node.auth_impls()) == set(IMPLS)
    for impl in IMPLS:                               # every engine can be switched to and back
        e.node.set_auth_impl(impl)
        assert e.node.auth_impl == impl and e.counters()["mac_impl"] == impl
        assert bool(e.counters()["mac_lib"]) == (impl == "ipsec-mb")
    with pytest.raises(ValueError, match="unknown MAC engine"):
        e.node.set_auth_impl("fast")
    assert e.node.auth_impl == IMPLS[-1]             # unchanged by the refusal


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(0, 1400), min_size=1, max_size=40), encrypt=st.booleans(),
       pair=st.sampled_from(list(itertools.permutations(IMPLS, 2)) or [("openssl", "openssl")]))
def test_a_datagram_sealed_by_one_engine_verifies_on_the_other(tmp_path, sizes, encrypt, pair):
    sender, receiver = pair
    a = engine(tmp_path, 1, encrypt=encrypt, impl=sender)
    b = engine(tmp_path, 2, impl=receiver)
    payloads = [bytes([k % 251]) * s for k, s in enumerate(sizes)]
    out = published(a, payloads)
    for d in out:
        assert bool(d[3] & wire.DGF_ENC) == encrypt              # the header's dflags
        assert b.receive_datagram(d, 1, 2000) != wire.Reason.AUTH
    assert b.node.rx_reasons() == {}
    got = sorted(b.recv(now=3000), key=lambda m: m.seq)
    assert [m.payload for m in got] == payloads
    # and any flipped bit fails on both engines
    for d in out[:3]:
        bad = bytearray(d)
        bad[(len(bad) * 7) // 11] ^= 0x10
        for impl in IMPLS:
            b.node.set_auth_impl(impl)
            assert b.receive_datagram(bytes(bad), 1, 2000) == wire.Reason.AUTH
    assert b.node.rx_reasons() == {"auth": len(out[:3]) * len(IMPLS)}


@pytest.mark.parametrize("encrypt", [False, True])
@pytest.mark.parametrize("impl", IMPLS)
def test_a_corrupted_datagram_in_the_middle_of_a_run_is_dropped_its_neighbours_pass(tmp_path, impl,
                                                                                    encrypt):
    """A run of equal-size datagrams (what the driver hands to one GSO
    send and the receiver gets back as one GRO buffer): each carries its
    own tag and is verified on its own."""
    a = engine(tmp_path, 1, encrypt=encrypt, impl=impl)
    b = engine(tmp_path, 2, impl=impl)
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


@pytest.mark.parametrize("impl", IMPLS)
def test_every_engine_survives_a_key_roll_over(tmp_path, impl):
    """Both keys of a roll-over get their own expanded key; a node that
    rolls over installs new ones, keeps its engine and still speaks to both
    generations."""
    old = engine(tmp_path, 1, keys=((1, KEY),), impl=impl)
    both = engine(tmp_path, 2, keys=((2, NEW), (1, KEY)), impl=impl)
    for d in published(old, [b"old%d" % k for k in range(40)]):
        assert both.receive_datagram(d, 1, 2000) != wire.Reason.AUTH     # verified under key 1
    assert len(both.recv(now=2500)) == 40
    # the old node rolls over: new contexts, same node
    old.node.set_auth([(2, NEW), (1, KEY)], 10 ** 12)
    assert old.node.auth_impl == impl
    for d in published(both, [b"new%d" % k for k in range(40)], now=3000):
        assert d[-25] == 2
        assert old.receive_datagram(d, 2, 4000) != wire.Reason.AUTH      # verified under key 2
    assert len(old.recv(now=4500)) == 40
    for d in published(old, [b"again%d" % k for k in range(40)], now=5000):
        assert both.receive_datagram(d, 1, 6000) != wire.Reason.AUTH
    assert len(both.recv(now=6500)) == 40
    assert old.node.rx_reasons() == {} and both.node.rx_reasons() == {}
    # a node that only has the new key does not accept the old one's tags
    only_new = engine(tmp_path, 2, keys=((2, NEW),), impl=impl)
    for d in published(engine(tmp_path, 1, keys=((1, KEY),), impl=impl), [b"stale"], now=7000):
        assert only_new.receive_datagram(d, 1, 8000) == wire.Reason.AUTH


def test_mac_impl_openssl_keeps_every_mac_in_openssl_and_talks_to_the_default(tmp_path):
    """Config.mac_impl = "openssl": a deployment that must use OpenSSL only
    gets EVP for every datagram, and still talks to nodes on the default."""
    specs = [MemberSpec(1, 1), MemberSpec(2, 2)]
    kf = write_keys(tmp_path / "keys", (1, KEY))
    lib = Engine(Config(node_id=1, members=specs, incarnation=1, key_file=kf, mac_impl="openssl"), 0,
                 mac_counter0=1000)
    auto = Engine(Config(node_id=2, members=specs, incarnation=1, key_file=kf), 0, mac_counter0=2000)
    assert lib.counters()["mac_impl"] == "openssl"
    assert auto.counters()["mac_impl"] == ("ipsec-mb" if IPSECMB else "openssl")
    for d in published(lib, [b"from-openssl-%d" % k for k in range(5)]):
        auto.receive_datagram(d, 1, 2000)
    got = [bytes(m.payload) for m in auto.recv(now=2001)]
    assert got == [b"from-openssl-%d" % k for k in range(5)]


@pytest.mark.parametrize("bad", ["fast", "direct", "OpenSSL", "", None, 1])
def test_an_unknown_mac_impl_is_a_config_error_naming_the_key(tmp_path, bad):
    kf = write_keys(tmp_path / "keys", (1, KEY))
    with pytest.raises(ConfigError, match="mac_impl") as e:
        Config(node_id=1, key_file=kf, mac_impl=bad)
    for name in ("auto", "ipsec-mb", "openssl"):
        assert repr(name) in str(e.value)                # says what it takes


def test_asking_for_the_library_where_it_cannot_run_is_a_config_error(tmp_path):
    """A deployment that names an engine gets it or does not start: never a
    silent fall-back.  (Here: whichever this build and CPU give; the other
    case runs in a build without the library, RPBCAST_NO_IPSECMB=1.)"""
    specs = [MemberSpec(1, 1), MemberSpec(2, 2)]
    kf = write_keys(tmp_path / "keys", (1, KEY))
    cfg = Config(node_id=1, members=specs, incarnation=1, key_file=kf, mac_impl="ipsec-mb")
    if IPSECMB:
        assert Engine(cfg, 0, mac_counter0=1).counters()["mac_impl"] == "ipsec-mb"
    else:
        with pytest.raises(ConfigError, match="mac_impl"):
            Engine(cfg, 0, mac_counter0=1)


@pytest.mark.parametrize("impl", ["ipsec-mb", "openssl"])
def test_rpbcast_stress_mac_impl_reaches_every_worker(tmp_path, impl):
    """bench/bench_auth.py compares the engines through `rpbcast stress
    --mac-impl`: every keyed worker's Config gets it."""
    from stressrun import stress_args
    from rpbcast.tools.stress.plan import make_plan, worker_spec
    kf = write_keys(tmp_path / "keys", (1, KEY))
    args = stress_args("--receivers", "1", "--loggers", "0", "--key-file", kf, "--mac-impl", impl,
                       "--run-dir", str(tmp_path / "run"))
    plan = make_plan(args, use_ns=False)
    specs = [worker_spec(args, plan, i, role) for role, ids in (("receiver", plan.receivers),
                                                                ("sender", plan.senders)) for i in ids]
    assert len(specs) == 2 and all(s["config"]["mac_impl"] == impl for s in specs)
