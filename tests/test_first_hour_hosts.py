"""Across hosts, as a new user deploys (issue 16): four network namespaces
joined by a bridge (a veth named eth0 in each), running docs/deploying.md's
group.toml and command lines exactly as written.  With the old default
ttl = 0 not one datagram crossed by multicast -- every message came by
unicast repair, and nothing said so."""
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid

import pytest

from rpbcast.tools import netns

pytestmark = [pytest.mark.netns, pytest.mark.timeout(240)]

HERE = os.path.dirname(os.path.abspath(__file__))
DOC = os.path.join(HERE, os.pardir, "docs", "deploying.md")


def doc_block(name):
    """The code block after `<!-- deploying: NAME -->` in docs/deploying.md."""
    text = open(DOC).read()
    m = re.search(rf"<!-- deploying: {re.escape(name)} -->\s*```\w*\n(.*?)```", text, re.S)
    assert m, f"docs/deploying.md has no '{name}' block"
    return m.group(1)


def commands():
    """[(host address, argv after 'rpbcast')] of the commands block."""
    out = []
    for line in doc_block("commands").splitlines():
        if line.strip():
            addr, cmd = line.split("$", 1)
            argv = shlex.split(cmd)
            assert argv[0] == "rpbcast"
            out.append((addr.strip(), argv[1:]))
    return out


def _ip(*a):
    subprocess.run(["ip", *a], check=True, capture_output=True)


@pytest.fixture
def hosts():
    """{address: namespace} for the four hosts of the doc, on one bridge."""
    addrs = sorted({a for a, _ in commands()}, key=lambda a: tuple(map(int, a.split("."))))
    tag = uuid.uuid4().hex[:6]
    br = f"rpb{tag}br"
    made = [br]
    ns = {}
    try:
        _ip("netns", "add", br)
        _ip("-n", br, "link", "add", "br0", "type", "bridge")
        _ip("-n", br, "link", "set", "br0", "up")
        for k, a in enumerate(addrs):
            h = f"rpb{tag}h{k}"
            _ip("netns", "add", h)
            made.append(h)
            v = f"rpb{tag}v{k}"
            _ip("link", "add", v, "type", "veth", "peer", "name", "eth0", "netns", h)
            _ip("link", "set", v, "netns", br)
            _ip("-n", br, "link", "set", v, "master", "br0", "up")
            _ip("-n", h, "link", "set", "lo", "up")
            _ip("-n", h, "addr", "add", f"{a}/24", "dev", "eth0")
            _ip("-n", h, "link", "set", "eth0", "up")
            _ip("-n", h, "route", "add", "224.0.0.0/4", "dev", "eth0")
            ns[a] = h
        yield ns
    finally:
        for n in reversed(made):
            netns.delete(n)


def rp(ns, argv):
    return ["ip", "netns", "exec", ns, sys.executable, "-m", "rpbcast", *argv]


def wait_for(path, timeout=30):
    end = time.time() + timeout
    while not os.path.exists(path) and time.time() < end:
        time.sleep(0.05)
    assert os.path.exists(path), path


def node_id(argv):
    return int(argv[argv.index("--node-id") + 1])


def test_the_deploying_doc_works_as_written_and_multicast_crosses_hosts(hosts, tmp_path):
    (tmp_path / "group.toml").write_text(doc_block("group.toml"))
    rt = tmp_path / "rt"
    env = dict(os.environ, RPBCAST_RUNTIME_DIR=str(rt))
    run = dict(cwd=tmp_path, env=env, text=True)
    cmds = commands()
    # doctor, on every host with that host's identity: nothing it will not reach
    for addr, argv in cmds:
        if argv[0] in ("logger", "sub", "pub"):
            ident = ["--node-id", str(node_id(argv)), "--bind", argv[argv.index("--bind") + 1]]
            r = subprocess.run(rp(hosts[addr], ["doctor", "-c", "group.toml", *ident]), capture_output=True,
                               timeout=60, **run)
            assert r.returncode == 0 and "no problems found" in r.stdout, r.stdout + r.stderr
            assert "reaches the 3 member(s) on other hosts" in r.stdout
    procs = {}
    try:
        for addr, argv in cmds:
            if argv[0] == "logger" or argv[0] == "sub":
                procs[node_id(argv)] = subprocess.Popen(rp(hosts[addr], argv), stdout=subprocess.PIPE,
                                                        stderr=subprocess.PIPE, **run)
                wait_for(rt / f"1-{node_id(argv)}.sock")
        (addr, argv), = [c for c in cmds if c[1][0] == "pub"]
        count = int(argv[argv.index("--count") + 1])
        r = subprocess.run(rp(hosts[addr], argv), capture_output=True, timeout=120, **run)
        assert r.returncode == 0, r.stderr
        assert "every message acknowledged" in r.stderr and "warning" not in r.stderr
        subs = [n for n in procs if n != 1]
        for n in subs:
            st = json.loads(subprocess.run([sys.executable, "-m", "rpbcast", "stat", "--node-id", str(n), "--once",
                                            "--json"], capture_output=True, timeout=30, **run).stdout)
            # the messages came by multicast, not by unicast repair
            assert st["rx_new"] >= count // 2, (st["rx_new"], st["repairs_peer"])
            assert st["repairs_peer"] + st["repairs_logger"] < count // 2
        for n in subs:
            procs[n].send_signal(signal.SIGTERM)
            out, err = procs[n].communicate(timeout=30)
            assert procs[n].returncode == 0, err
            assert f"{count:,} distinct" in out and "0 delivered more than once" in out, out
            assert not (rt / f"1-{n}.sock").exists()
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()


def test_a_configuration_that_keeps_multicast_on_one_host_is_reported(hosts, tmp_path):
    """ttl = 0 (or interface lo) with members on other hosts: doctor says so
    and exits 1, and a node warns at start-up."""
    (tmp_path / "group.toml").write_text(doc_block("group.toml"))
    env = dict(os.environ, RPBCAST_RUNTIME_DIR=str(tmp_path / "rt"))
    run = dict(cwd=tmp_path, env=env, text=True, capture_output=True, timeout=60)
    addr, argv = next(c for c in commands() if c[1][0] == "sub")
    ident = ["--node-id", str(node_id(argv)), "--bind", argv[argv.index("--bind") + 1]]
    r = subprocess.run(rp(hosts[addr], ["doctor", "-c", "group.toml", *ident, "--ttl", "0"]), **run)
    assert r.returncode == 1 and "ttl = 0 keeps multicast on this host" in r.stdout, r.stdout
    r = subprocess.run(rp(hosts[addr], ["sub", "-c", "group.toml", *ident, "--ttl", "0", "--count-only",
                                        "--timeout", "0.3"]), **run)
    assert "warning: ttl = 0 keeps multicast on this host" in r.stderr, r.stderr
    assert "unicast repair only" in r.stderr


def test_the_default_ttl_carries_multicast_to_the_other_hosts(hosts):
    """Config's defaults plus the four things docs/deploying.md names (bind,
    interface, members): the publisher's multicast reaches a member on
    another host directly (it used to arrive by unicast repair only)."""
    from rpbcast import Config, MemberSpec
    from rpbcast.api import Node
    a_sub, a_pub = sorted(hosts)[1], sorted(hosts)[3]
    specs = [MemberSpec(2, f"{a_sub}:7401"), MemberSpec(4, f"{a_pub}:7401")]
    nodes = []
    try:
        with netns.entered(hosts[a_sub]):
            rcv = Node(Config(node_id=2, bind=f"{a_sub}:7401", interface="eth0", members=specs))
            nodes.append(rcv)
        with netns.entered(hosts[a_pub]):
            pub = Node(Config(node_id=4, bind=f"{a_pub}:7401", interface="eth0", members=specs))
            nodes.append(pub)
        assert rcv.warnings == [] and pub.warnings == []
        for k in range(2000):
            pub.publish(b"m%d" % k)
        got, end = 0, time.time() + 10
        buf = bytearray(1 << 20)
        while got < 2000 and time.time() < end:
            b = rcv.recv_batch(4096, buf)
            got += b.count
            if not b.count:
                time.sleep(0.01)
        st = rcv.stats()
        assert got == 2000
        assert st["rx_new"] >= 1000 and st["repairs_peer"] < 1000, (st["rx_new"], st["repairs_peer"])
    finally:
        for n in nodes:
            n.close(**({"linger": 0} if "linger" in Node.close.__code__.co_varnames else {}))
