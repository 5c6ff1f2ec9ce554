"""IPv6 in the tools (issue 18): `rpbcast stress --hosts --ipv6` runs a group
on an ff02:: group across a veth LAN (every host its own namespace, a
bridge between them, loss from ip6tables), and `rpbcast doctor` checks an
IPv6 configuration on a host of such a LAN.  Short: seconds each."""
import subprocess
import sys

import pytest
from stressrun import stress, stress_args

from rpbcast.tools import netns
from rpbcast.tools.stress import cli as stress_cli

pytestmark = [pytest.mark.timeout(150)]

needs_netns = pytest.mark.skipif(not netns.available(), reason="needs root and iproute2")


@pytest.mark.netns
@needs_netns
def test_stress_between_hosts_on_an_ipv6_group_delivers_exactly_once_under_loss(tmp_path):
    rc, s = stress("--hosts", "--ipv6", "--receivers", "2", "--rate", "50000", "--duration", "1",
                   "--loss", "0.01", "--timeout", "30", tmp_path=tmp_path, timeout=120)
    assert rc == 0 and s["exactly_once"], s["problems"]
    assert s["hosts"] and s["ipv6"] and s["transport"] == "multicast"
    assert s["group_addr"].startswith("[ff02::")
    assert "ip6tables" in s["loss_model"]
    # the loss rule is on IPv6 UDP only: it dropped packets, so the traffic was IPv6
    assert s["kernel_drops"][0] > 0
    assert s["sent"] > 10_000


def test_stress_ipv6_options_are_checked_before_anything_starts(tmp_path):
    def problem(*argv):
        return stress_cli.check_args(stress_args(*argv), True)
    assert "add --hosts" in problem("--ipv6")
    assert "--partition" in problem("--hosts", "--ipv6", "--partition", "2:1:1")
    assert problem("--hosts", "--ipv6", "--loss", "0.01", "--kill", "receiver:2:0.5:0.2") is None
    r = subprocess.run([sys.executable, "-m", "rpbcast", "stress", "--ipv6", "--run-dir", str(tmp_path / "run")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "add --hosts" in r.stderr
    assert not (tmp_path / "run").exists()


def doctor(ns, *argv):
    r = subprocess.run(netns.exec_argv(ns, [sys.executable, "-m", "rpbcast", "doctor", *argv]),
                       capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


@pytest.mark.netns
@needs_netns
def test_doctor_checks_an_ipv6_group_across_hosts():
    with netns.HostNet([1, 2, 3], ipv6=True) as net:
        members = [f"--member={i}={net.endpoint(i, 7300)}" for i in (1, 2, 3)]
        base = ["--node-id", "1", "--bind", net.endpoint(1, 7300), *members]
        # the right configuration: the group on the hosts' link, out of eth0
        rc, out = doctor(net.ns[1], *base, "--group", net.group(7400), "--interface", "eth0", "--ttl", "1")
        assert rc == 0, out
        assert "[ok] multicast [ff02::7262:1]:7400 on eth0 with ttl 1 reaches the 2 member(s)" in out, out
        # the group out of loopback: the others never hear it
        subprocess.run(["ip", "-n", net.ns[1], "link", "set", "lo", "multicast", "on"], check=True)
        rc, out = doctor(net.ns[1], *base, "--group", net.group(7400), "--interface", "lo", "--ttl", "1")
        assert rc == 1 and "(loopback), which never leaves this host" in out, out
        # an interface-local group never leaves the host either
        rc, out = doctor(net.ns[1], *base, "--group", "[ff01::1]:7400", "--interface", "eth0", "--ttl", "1")
        assert rc == 1 and "interface-local" in out, out
        # bound to another host's address
        rc, out = doctor(net.ns[1], "--node-id", "1", "--bind", net.endpoint(2, 7300), *members,
                         "--group", net.group(7400), "--interface", "eth0")
        assert rc == 1 and "that address is not on this host" in out, out
        # a member with no route
        rc, out = doctor(net.ns[1], *base, "--member=4=[fd7a::4]:7300", "--group", net.group(7400),
                         "--interface", "eth0")
        assert rc == 1 and "no route to member(s) 4" in out, out
