"""What a new user hits in the first hour (issue 16), on real sockets
(unicast on 127.0.0.1; the across-hosts findings are in
test_first_hour_hosts.py): publishing that never loses data silently,
a publisher that says what it waits for, the command line's exit codes,
`stat` and `sub --count-only`, restart semantics."""
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from rpbcast import Config, MemberSpec
from rpbcast.api import Node

pytestmark = pytest.mark.timeout(120)


def ports(n):
    out, socks = [], []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        out.append(s.getsockname()[1])
        socks.append(s)
    for s in socks:
        s.close()
    return out


def rp(*args):
    return [sys.executable, "-m", "rpbcast", *args]


class Group:
    """Members 1.. on 127.0.0.1 (unicast fan-out); `loggers` are ids with role logger."""

    def __init__(self, tmp_path, ids, loggers=()):
        self.tmp = tmp_path
        self.port = dict(zip(ids, ports(len(ids))))
        self.specs = [MemberSpec(i, f"127.0.0.1:{p}", "logger" if i in loggers else "member")
                      for i, p in self.port.items()]
        self.nodes = []

    def config(self, i, **kw):
        c = dict(node_id=i, bind=f"127.0.0.1:{self.port[i]}", members=self.specs, transport="unicast",
                 gossip_interval=0.05)
        if any(m.node_id == i and m.role == "logger" for m in self.specs):
            c.update(role="logger", log_dir=str(self.tmp / f"log{i}"))
        c.update(kw)
        return Config(**c)

    def node(self, i, **kw):
        resume = kw.pop("resume", None)
        n = Node(self.config(i, **kw), resume=resume)
        self.nodes.append(n)
        return n

    def cli_members(self):
        out = []
        for m in self.specs:
            out += ["--member", f"{m.node_id}={m.addr}" + ("/logger" if m.role == "logger" else "")]
        return ["--transport", "unicast", *out]

    def close(self):
        for n in reversed(self.nodes):
            try:
                n.close(linger=0)
            except TypeError:       # (a build without draining)
                n.close()


@pytest.fixture
def group(tmp_path):
    made = []

    def make(ids, loggers=()):
        g = Group(tmp_path, ids, loggers)
        made.append(g)
        return g
    yield make
    for g in made:
        g.close()


def all_acked(pub, timeout=10.0):
    """Wait until the logger acknowledged everything pub published."""
    end = time.time() + timeout
    while pub.stats()["unacked"] and time.time() < end:
        time.sleep(0.01)
    return pub.stats()["unacked"] == 0


def take(node, want, timeout=10.0):
    """{(sender, seq): deliveries} until `want` distinct ids or timeout."""
    got = {}
    end = time.time() + timeout
    buf = bytearray(16 << 20)
    while len(got) < want and time.time() < end:
        b = node.recv_batch(65536, buf)
        for s, q in zip(b.senders[:b.count].tolist(), b.seqs[:b.count].tolist()):
            got[(s, q)] = got.get((s, q), 0) + 1
        if not b.count:
            node.transport.wait(0.05)
    return got


# ---------------------------------------------------------------- draining

def test_close_waits_until_the_logger_holds_every_published_message(group):
    """close() drains by default: it returns only once what flow control
    waits for (the logger) acknowledged everything -- here a logger that
    loses 30 % of what arrives, so its copies come late, by resends.  It
    used to return at once and the rest was never logged anywhere."""
    g = group([1, 9], loggers=[9])
    lg = g.node(9, drop_rate=0.3)
    pub = g.node(1, logger_retx_timeout=0.2)
    n = 0
    while n < 20000:
        n += pub.publish_batch([b"m%05d" % k for k in range(n, min(n + 1000, 20000))])
    drain = pub.close()
    assert drain and drain.drained and drain.unacked == 0, drain
    assert lg.stats()["logged"] == 20000


def test_flush_with_a_timeout_reports_what_waits_for_whom(group):
    g = group([1, 9], loggers=[9])              # logger 9 never starts
    pub = g.node(1)
    for k in range(10):
        pub.publish(b"x%d" % k)
    d = pub.flush(timeout=0.3)
    assert not d and d.unacked == 10 and (d.first, d.last) == (0, 9)
    assert d.waited >= 0.29
    assert len(d.waiting_for) == 1 and "logger 9" in d.waiting_for[0] and "never heard from" in d.waiting_for[0]
    assert "10 published message(s) not acknowledged" in str(d)
    t = time.monotonic()
    d2 = pub.close(linger=0.3)
    assert time.monotonic() - t < 2 and not d2 and d2.unacked == 10


def test_a_publisher_waiting_on_an_absent_logger_says_so_within_two_seconds(group, caplog):
    g = group([1, 9], loggers=[9])
    with caplog.at_level(logging.WARNING, logger="rpbcast"):
        pub = g.node(1)
        t0 = time.monotonic()
        pub.publish(b"hello")
        while pub.stalled is None and time.monotonic() - t0 < 5:
            time.sleep(0.05)
        took = time.monotonic() - t0
    assert pub.stalled is not None and took < 2.0, took
    said = [r.getMessage() for r in caplog.records if "without an acknowledgment" in r.getMessage()]
    assert said and "logger 9 at 127.0.0.1:" in said[0] and "never heard from" in said[0]
    info = {m["id"]: m for m in pub.member_info()}
    assert info[9]["last_heard_s"] is None and info[1]["self"]


def test_pub_exits_non_zero_saying_what_was_not_acknowledged(group, tmp_path):
    g = group([1, 9], loggers=[9])
    env = dict(os.environ, RPBCAST_RUNTIME_DIR=str(tmp_path / "rt"))
    r = subprocess.run(rp("pub", "--node-id", "1", "--bind", g.specs[0].addr, *g.cli_members(),
                          "--count", "100", "--linger", "1.5"), env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert "100 published message(s) not acknowledged" in r.stderr
    assert "waiting for logger 9" in r.stderr and "never heard from" in r.stderr
    assert "Traceback" not in r.stderr


def test_pub_batch_and_sub_count_only_end_to_end_exactly_once(group, tmp_path):
    g = group([1, 2, 9], loggers=[9])
    env = dict(os.environ, RPBCAST_RUNTIME_DIR=str(tmp_path / "rt"))
    m = g.cli_members()
    lg = subprocess.Popen(rp("logger", "--node-id", "9", "--bind", g.specs[2].addr, "--dir", str(tmp_path / "log"),
                             *m), env=env, stderr=subprocess.PIPE, text=True)
    sub = subprocess.Popen(rp("sub", "--node-id", "2", "--bind", g.specs[1].addr, *m, "--count-only",
                              "--count", "300000", "--timeout", "20", "--format", "json"),
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for p in ("1-9.sock", "1-2.sock"):
            end = time.time() + 20
            while not (tmp_path / "rt" / p).exists() and time.time() < end:
                time.sleep(0.05)
        r = subprocess.run(rp("pub", "--node-id", "1", "--bind", g.specs[0].addr, *m, "--count", "300000",
                              "--batch", "256"), env=env, capture_output=True, text=True, timeout=90)
        assert r.returncode == 0, r.stderr
        assert "every message acknowledged" in r.stderr
        out, err = sub.communicate(timeout=60)
        assert sub.returncode == 0, err
        rep = json.loads(out.strip().splitlines()[-1])
        assert rep["delivered"] == 300000
        (s,) = rep["streams"]
        assert (s["sender"], s["distinct"], s["first"], s["last"], s["duplicates"]) == (1, 300000, 0, 299999, 0)
    finally:
        lg.send_signal(signal.SIGTERM)
        lg.wait(timeout=20)
        sub.kill()


def test_pub_warns_when_the_rate_cannot_be_met(group, tmp_path):
    g = group([1])
    env = dict(os.environ, RPBCAST_RUNTIME_DIR=str(tmp_path / "rt"))
    r = subprocess.run(rp("pub", "--node-id", "1", "--bind", g.specs[0].addr, "--transport", "unicast",
                          "--member", f"1={g.specs[0].addr}", "--count", "60000", "--rate", "1e9", "--linger", "0"),
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "--rate 1,000,000,000 is not met" in r.stderr and "msgs/s" in r.stderr


def test_sub_that_times_out_short_of_its_count_exits_non_zero(group, tmp_path):
    g = group([2])
    env = dict(os.environ, RPBCAST_RUNTIME_DIR=str(tmp_path / "rt"))
    r = subprocess.run(rp("sub", "--node-id", "2", "--bind", g.specs[0].addr, "--transport", "unicast",
                          "--member", f"2={g.specs[0].addr}", "--count", "5", "--timeout", "0.5"),
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "received 0 of 5 messages" in r.stderr


# ---------------------------------------------------------------- stat

def test_stat_shows_unacknowledged_lost_per_sender_and_never_heard_members(group, tmp_path):
    g = group([1, 2, 9], loggers=[9])             # the logger never starts
    rt = tmp_path / "rt"
    rt.mkdir()
    env = dict(os.environ, RPBCAST_RUNTIME_DIR=str(rt))
    pub = Node(g.config(1), stats_socket=str(rt / "1-1.sock"))
    rcv = Node(g.config(2), stats_socket=str(rt / "1-2.sock"))
    g.nodes += [pub, rcv]
    for k in range(25):
        pub.publish(b"m%d" % k)
    assert len(take(rcv, 25)) == 25
    r = subprocess.run(rp("stat", "--node-id", "1", "--once"), env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "unacknowledged: 25 published messages (seqs 0..24), waiting for logger 9" in r.stdout
    assert "lost: 0" in r.stdout
    line9 = next(x for x in r.stdout.splitlines() if x.split()[:2] == ["9", "logger"])
    assert "never heard from" in line9
    r = subprocess.run(rp("stat", "--node-id", "2", "--once"), env=env, capture_output=True, text=True, timeout=30)
    row = next(x for x in r.stdout.splitlines() if x.startswith(f"1/{pub.incarnation}"))
    assert row.split()[1:4] == ["25", "25", "0"]                   # received, next seq, missing
    js = json.loads(subprocess.run(rp("stat", "--node-id", "1", "--once", "--json"), env=env,
                                   capture_output=True, text=True, timeout=30).stdout)
    assert {m["id"]: m["last_heard_s"] for m in js["member_info"]}[9] is None
    assert js["send_buffer"]["unacked"] == 25 and js["lost"] == 0


def test_stat_into_a_closed_pipe_is_no_error(group, tmp_path):
    g = group([1])
    rt = tmp_path / "rt"
    rt.mkdir()
    n = Node(g.config(1), stats_socket=str(rt / "1-1.sock"))
    g.nodes.append(n)
    env = dict(os.environ, RPBCAST_RUNTIME_DIR=str(rt))
    p = subprocess.Popen(rp("stat", "--node-id", "1", "--interval", "0.05"), env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.readline()
    p.stdout.close()                 # `| head -1`
    _, err = p.communicate(timeout=30)
    assert b"BrokenPipeError" not in err and b"Traceback" not in err, err
    assert p.returncode == 0


def test_a_sub_ended_by_sigterm_leaves_no_stale_socket_and_stat_explains_one(group, tmp_path):
    g = group([2])
    rt = tmp_path / "rt"
    env = dict(os.environ, RPBCAST_RUNTIME_DIR=str(rt))
    p = subprocess.Popen(rp("sub", "--node-id", "2", "--bind", g.specs[0].addr, "--transport", "unicast",
                            "--member", f"2={g.specs[0].addr}"), env=env, stderr=subprocess.PIPE)
    sock = rt / "1-2.sock"
    end = time.time() + 20
    while not sock.exists() and time.time() < end:
        time.sleep(0.05)
    assert sock.exists()
    time.sleep(0.3)
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=20)
    assert not sock.exists()
    # a node killed with SIGKILL cannot clean up: stat says what that socket is
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(sock))
    s.close()
    r = subprocess.run(rp("stat", "--node-id", "2", "--once"), env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "stale socket" in r.stderr and "not running" in r.stderr


# ---------------------------------------------------------------- restarts

def test_a_restarted_subscriber_resumes_exactly_once_above_a_hole(group):
    """What it delivered before the restart -- 0..99 and 150..199, a hole
    in between (unordered delivery hands out ids past a gap) -- it never
    gets again; the rest it gets once."""
    g = group([1, 2, 3, 9], loggers=[9])
    g.node(9)
    pub = g.node(1)
    for k in range(300):
        pub.publish(b"m%d" % k)
    assert all_acked(pub)
    delivered = np.concatenate([np.arange(0, 100), np.arange(150, 200)])
    key = (1, pub.incarnation)
    for i, form in ((2, delivered), (3, [(0, 99), (150, 199)])):
        rcv = g.node(i, resume={key: form})
        got = take(rcv, 150, timeout=10)
        time.sleep(0.5)
        got2 = take(rcv, 1, timeout=0.2)
        for k, v in got2.items():
            got[k] = got.get(k, 0) + v
        assert set(got) == {(1, q) for q in list(range(100, 150)) + list(range(200, 300))}
        assert max(got.values()) == 1
        rcv.close(linger=0)


def test_resume_forms_are_the_same_ranges():
    from rpbcast.protocol.engine import delivered_ranges
    assert delivered_ranges(5) == [(0, 4)] and delivered_ranges(0) == []
    assert delivered_ranges(np.array([3, 1, 2, 7, 9, 8])) == [(1, 3), (7, 9)]
    assert delivered_ranges([5, 6, 0]) == [(0, 0), (5, 6)]
    assert delivered_ranges([(4, 6), (0, 1), (2, 2), (10, 12)]) == [(0, 2), (4, 6), (10, 12)]
    with pytest.raises(ValueError):
        delivered_ranges([(5, 4)])


@pytest.mark.parametrize("catch_up", [False, True], ids=["default", "catch_up"])
def test_a_subscriber_started_while_a_stream_runs_gets_what_the_docs_say(group, catch_up):
    """catch_up = False (the default): what is published after it started;
    True: also everything before, from the logger.  A restarted `sub`
    replayed the whole history with the default."""
    g = group([1, 2, 9], loggers=[9])
    g.node(9)
    pub = g.node(1)
    for k in range(500):
        pub.publish(b"old%d" % k)
    assert all_acked(pub)
    rcv = g.node(2, catch_up=catch_up)
    time.sleep(0.3)
    for k in range(500, 600):
        pub.publish(b"new%d" % k)
    want = set(range(0 if catch_up else 500, 600))
    got = take(rcv, len(want), timeout=10)
    time.sleep(0.5)
    for k, v in take(rcv, 1, timeout=0.2).items():
        got[k] = got.get(k, 0) + v
    assert {q for _, q in got} == want
    assert max(got.values()) == 1
    assert rcv.stats()["lost"] == 0
