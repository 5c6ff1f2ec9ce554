"""Config.prefault (csrc/bigmem.h): the message store is touched in full
when the node is made, so that the data path's first lap over it takes no
page fault (issue 15, the maximum-rate goal: faulting in the stress's 704 MiB
store inside the run cost a third of its delivered rate, docs/performance.md
"Pre-touching the store")."""
import pytest

from rpbcast import Config, ConfigError, MemberSpec
from rpbcast.core import msgstore
from rpbcast.core.msgstore import MessageStore
from rpbcast.protocol.engine import Engine

MiB = 1 << 20
ENTRY = 48                    # sizeof(rp_msent_t)


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_a_prefaulted_store_is_resident_when_made_and_given_back_when_freed():
    arena, entries = 64 * MiB, 1 << 20
    r0 = rss()
    lazy = MessageStore(arena, entries)
    assert rss() - r0 < 4 * MiB                    # untouched: nothing resident yet
    r1 = rss()
    s = MessageStore(arena, entries, prefault=True)
    assert rss() - r1 >= 0.95 * (arena + entries * ENTRY)
    r2 = rss()
    del s
    assert r2 - rss() >= 0.95 * (arena + entries * ENTRY)     # unmapped in full
    del lazy


@pytest.mark.parametrize("prefault", [False, True])
def test_a_mapped_store_keeps_every_payload_across_laps(prefault):
    """The arena and entry ring at and above 1 MiB are mappings of their own
    (below, calloc): a store over them wraps and evicts as the small ones
    the model tests check."""
    arena = MiB + 1500                             # not a page multiple
    s = MessageStore(arena, 1 << 15, prefault=prefault)
    last = {}
    for i in range(3 * arena // 700):
        p = bytes((i * 31 + k) % 251 for k in range(700))
        tk = s.put(0, i, p, holds=msgstore.GOSSIP)
        assert tk is not None
        last[tk] = p
        for old in (t for t in (tk, tk - 1, tk - 50) if t >= 0):
            got = s.get(old)
            if got is not None:
                assert got[-1] == last[old]
    assert s.counters()["evicted"] > 2 * arena // 700 - 100        # it went round twice
    assert s.arena_bytes == arena


def test_config_prefault_reaches_the_nodes_store():
    specs = [MemberSpec(1, 1), MemberSpec(2, 2)]
    r0 = rss()
    e = Engine(Config(node_id=1, members=specs, incarnation=1, store_bytes=32 * MiB, store_entries=1 << 18,
                      prefault=True), 0)
    assert rss() - r0 >= 0.95 * (32 * MiB + (1 << 18) * ENTRY)
    r1 = rss()
    lazy = Engine(Config(node_id=2, members=specs, incarnation=1, store_bytes=32 * MiB,
                         store_entries=1 << 18), 0)
    assert rss() - r1 < 8 * MiB
    del e, lazy


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_a_prefault_that_is_not_a_bool_names_the_key(bad):
    with pytest.raises(ConfigError, match="prefault"):
        Config(node_id=1, prefault=bad).validate()


def test_rpbcast_stress_prefaults_unless_told_not_to(tmp_path):
    from stressrun import stress_args
    from rpbcast.tools.stress.plan import make_plan, worker_spec
    for extra, want in (((), True), (("--no-prefault",), False)):
        args = stress_args("--receivers", "1", "--run-dir", str(tmp_path / f"run{want}"), *extra)
        plan = make_plan(args, use_ns=False)
        specs = [worker_spec(args, plan, i, role) for role, ids in (("receiver", plan.receivers),
                                                                    ("logger", plan.loggers),
                                                                    ("sender", plan.senders)) for i in ids]
        assert len(specs) == 3 and all(s["config"]["prefault"] is want for s in specs)
        Config.from_dict(specs[0]["config"]).validate()
