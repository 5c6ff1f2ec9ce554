"""Atomic delivery on real sockets (multicast in a network namespace each
test creates): the blocking and asyncio API, a member SIGKILLed after its
YES and restarted, a sender SIGKILLed between the votes and its decision,
and `rpbcast stress --atomic` with kernel loss and a killed receiver."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from rpbcast.config import Config, MemberSpec
from rpbcast.tools import netns

pytestmark = [pytest.mark.netns, pytest.mark.timeout(300)]

PORT = 27300


def members(ids):
    return [MemberSpec(i, f"127.0.0.1:{PORT + i}") for i in ids]


def config(i, ids, tmp_path, **kw):
    return Config(node_id=i, members=members(ids), bind=f"127.0.0.1:{PORT + i}", atomic=True,
                  state_dir=str(tmp_path / f"state{i}"), gossip_interval=0.02, **kw)


def test_publish_atomic_and_receive_atomic(tmp_path):
    from rpbcast import Node
    ids = [1, 2, 3]
    with netns.namespace() as ns, netns.entered(ns):
        nodes = {i: Node(config(i, ids, tmp_path)) for i in ids}
        try:
            time.sleep(0.2)
            outs = [nodes[1].publish_atomic(b"m%d" % k, timeout=2.0) for k in range(20)]
            assert all(o.committed and o.snapshot == 2 for o in outs), outs
            for i in (2, 3):
                got = [bytes(nodes[i].receive_atomic(timeout=2.0).payload) for _ in range(20)]
                assert got == [b"m%d" % k for k in range(20)]          # one sender, one at a time: in order
                assert nodes[i].receive_atomic(timeout=0.2) is None
                assert nodes[i].recv_batch().count == 0                 # records never reach the ordinary path

            async def both():
                o = await nodes[2].apublish_atomic(b"async", timeout=2.0)
                m = await asyncio.wait_for(nodes[3].areceive_atomic(), 5.0)
                return o, m
            o, m = asyncio.run(both())
            assert o.committed and (m.sender, bytes(m.payload)) == (2, b"async")
            st = nodes[1].atomic_state()
            assert st["commits"] == 20 and st["pending"] == 0
            with pytest.raises(ValueError, match="reserved"):
                nodes[1].publish(b"forged", label=2**64 - 2)
        finally:
            for n in nodes.values():
                n.close()


CHILD = textwrap.dedent('''
    import json, sys, time
    from rpbcast import Node, Config
    from rpbcast.config import MemberSpec
    i, port, ids, state = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
    cfg = Config(node_id=i, members=[MemberSpec(j, f"127.0.0.1:{port + j}") for j in ids],
                 bind=f"127.0.0.1:{port + i}", atomic=True, state_dir=state, gossip_interval=0.02,
                 atomic_timeout=30.0, atomic_boot_after=30.0)
    node = Node(cfg)
    st = node.atomic_state()
    print(json.dumps({"ready": i, "recovered_pending": st.get("recovered_pending", 0)}), flush=True)
    import threading
    def publisher():
        for line in sys.stdin:
            if line.startswith("publish"):
                o = node.publish_atomic(line.split()[1].encode(), timeout=30.0)
                print(json.dumps({"outcome": o.committed, "seq": o.seq}), flush=True)
    threading.Thread(target=publisher, daemon=True).start()
    while True:
        m = node.receive_atomic(timeout=0.05)
        if m is not None:
            print(json.dumps({"got": [m.sender, m.inc, m.seq, bytes(m.payload).decode()]}), flush=True)
        st = node.atomic_state()
        print(json.dumps({"state": {k: st.get(k, 0) for k in ("held", "in_doubt", "voted_yes", "pending")}}),
              flush=True)
''')


class Child:
    """A member in a process of its own (SIGKILL is a real crash)."""

    def __init__(self, tmp_path, i, ids):
        script = tmp_path / "child.py"
        script.write_text(CHILD)
        env = dict(os.environ)
        self.p = subprocess.Popen([sys.executable, str(script), str(i), str(PORT), json.dumps(ids),
                                   str(tmp_path / f"state{i}")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, bufsize=1, env=env)
        self.state = {}
        self.got = []
        self.outcomes = []
        self.hello = self.read_until(lambda ev: "ready" in ev, 20)

    def read_until(self, cond, timeout):
        end = time.time() + timeout
        while time.time() < end:
            line = self.p.stdout.readline()
            if not line:
                break
            ev = json.loads(line)
            if "state" in ev:
                self.state = ev["state"]
            if "got" in ev:
                self.got.append(tuple(ev["got"]))
            if "outcome" in ev:
                self.outcomes.append(ev)
            if cond(ev):
                return ev
        raise AssertionError(f"timed out; state {self.state}, got {self.got}")

    def send(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def kill(self):
        self.p.send_signal(signal.SIGKILL)
        self.p.wait()


def block(ns, src_port, dst_port, on=True):
    """Drop UDP from src_port to dst_port inside the namespace."""
    ipt = netns.iptables_bin()
    subprocess.run(["ip", "netns", "exec", ns, ipt, "-A" if on else "-D", "INPUT", "-p", "udp", "--sport",
                    str(src_port), "--dport", str(dst_port), "-j", "DROP"], check=True)


def test_member_killed_after_its_yes_restarts_and_delivers_once(tmp_path):
    """Node 3 votes YES, is SIGKILLed before the decision, comes back as a
    new process: it finds the proposal in its journal, learns the decision
    and delivers it exactly once."""
    from rpbcast import Node
    ids = [1, 2, 3]
    with netns.namespace() as ns, netns.entered(ns):
        n1 = Node(config(1, ids, tmp_path, atomic_boot_after=30.0))
        n2 = Node(config(2, ids, tmp_path))
        c3 = Child(tmp_path, 3, ids)
        try:
            time.sleep(0.2)
            block(ns, PORT + 2, PORT + 1)             # 2's votes do not reach 1 yet
            box = []
            import threading
            t = threading.Thread(target=lambda: box.append(n1.publish_atomic(b"kept", timeout=20.0)))
            t.start()
            # wait until 1 holds 3's YES
            end = time.time() + 10
            while time.time() < end:
                n1.transport.lock()
                try:
                    pend = list(n1._atomic.coordinator.pending.values())
                    has3 = bool(pend) and 3 in pend[0].yes
                finally:
                    n1.transport.unlock()
                if has3:
                    break
                time.sleep(0.01)
            assert has3
            c3.kill()
            block(ns, PORT + 2, PORT + 1, on=False)   # 2's YES arrives: COMMIT, with 3's YES counted
            t.join(15)
            assert box and box[0].committed and box[0].snapshot == 2
            assert bytes(n2.receive_atomic(timeout=5).payload) == b"kept"
            c3 = Child(tmp_path, 3, ids)               # a new incarnation, the same journal
            assert c3.hello["recovered_pending"] == 1
            c3.read_until(lambda ev: "got" in ev, 20)
            assert [g[3] for g in c3.got] == ["kept"]
            time.sleep(1.0)
            c3.read_until(lambda ev: "state" in ev, 5)
            assert [g[3] for g in c3.got] == ["kept"]  # once
        finally:
            c3.kill()
            n1.close()
            n2.close()


def test_sender_killed_between_votes_and_decision(tmp_path):
    """The sender holds one YES of two and is SIGKILLed: the voters stay in
    doubt (never abort alone: the sender might have committed) until the
    restarted sender's FENCE aborts the proposal; nobody delivers it."""
    from rpbcast import Node
    ids = [1, 2, 3]
    with netns.namespace() as ns, netns.entered(ns):
        n2 = Node(config(2, ids, tmp_path, atomic_ask_max=0.2))
        n3 = Node(config(3, ids, tmp_path, atomic_ask_max=0.2))
        c1 = Child(tmp_path, 1, ids)
        try:
            time.sleep(0.3)
            block(ns, PORT + 3, PORT + 1)              # 3's votes do not reach the sender
            c1.send("publish doomed")
            end = time.time() + 10
            while time.time() < end and not (n2.atomic_state()["held"] and n3.atomic_state()["held"]):
                time.sleep(0.01)
            time.sleep(0.2)                            # 2's YES is at 1 by now
            c1.kill()
            block(ns, PORT + 3, PORT + 1, on=False)
            time.sleep(2.0)
            for n in (n2, n3):
                st = n.atomic_state()
                assert st["held"] == 1, st             # in doubt: neither delivered nor aborted
                assert n.receive_atomic(timeout=0.1) is None
            c1 = Child(tmp_path, 1, ids)               # restarted: FENCE
            end = time.time() + 15
            while time.time() < end and (n2.atomic_state()["held"] or n3.atomic_state()["held"]):
                time.sleep(0.05)
            for n in (n2, n3):
                st = n.atomic_state()
                assert st["held"] == 0 and st.get("aborted_here") == 1, st
                assert n.receive_atomic(timeout=0.2) is None
        finally:
            c1.kill()
            n2.close()
            n3.close()


def test_stress_atomic_with_loss_and_a_killed_receiver(tmp_path):
    r = subprocess.run([sys.executable, "-m", "rpbcast", "stress", "--atomic", "--json", "--quiet",
                        "--receivers", "3", "--loggers", "1", "--duration", "3", "--loss", "0.02",
                        "--kill-receiver", "1.0", "--restart-after", "0.3", "--atomic-timeout", "3",
                        "--run-dir", str(tmp_path / "run")], capture_output=True, text=True, timeout=240)
    s = json.loads(r.stdout)
    a = s["atomic"]
    assert r.returncode == 0 and s["exactly_once"] and a["all_or_none"], (a, r.stderr[-2000:])
    assert s["receiver_killed"] and s["kernel_drops"][0] > 0
    assert a["commits"] > 50 and a["commit_latency_p50"] is not None
    assert list(a["recovered_pending"]) == ["2"]          # the victim (first receiver) came back from its journal
