"""The atomic-delivery experiment (rpbcast experiment atomic-flat /
atomic-tree) on small groups: it runs the real engines with the atomic
layer in the simulator, over rpbcast and over SRM, and measures what the
write-up reports."""
from __future__ import annotations

import pytest

from rpbcast.experiments import atomic
from rpbcast.experiments.cli import registry


def point(**kw):
    spec = dict(protocol="rpbcast", votes="flat", n=20, loss=0.01, seed=3, proposals=8, rate=4.0, timeout=1.0)
    spec.update(kw)
    return atomic.run_point(spec)


@pytest.mark.parametrize("protocol", ["rpbcast", "srm"])
def test_a_small_group_commits_everything_and_delivers_it_everywhere(protocol):
    r = point(protocol=protocol)
    assert r["proposals"] == r["decided"] == 8
    assert r["abort_rate"] == 0 and r["delivered_everywhere"]
    assert 0 < r["latency_p50"] < 1.0
    # each member's YES, at least once, in every proposal
    assert r["ack_bytes_per_member"] >= 24


def test_tree_votes_spare_the_sender():
    flat, tree = point(n=40), point(n=40, votes="tree")
    assert flat["abort_rate"] == tree["abort_rate"] == 0
    assert tree["ack_bytes_at_sender"] * 3 < flat["ack_bytes_at_sender"], (flat, tree)


def test_the_experiments_are_registered():
    reg = registry()
    assert {"atomic-flat", "atomic-tree"} <= set(reg)
