"""The command line, run as separate processes (unicast on 127.0.0.1)."""
import json
import os
import socket
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.timeout(120)


def ports(n):
    out = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        out.append(s.getsockname()[1])
        s.close()
    return out


def rp(*args, **kw):
    return [sys.executable, "-m", "rpbcast", *args]


def test_pub_sub_logger_stat(tmp_path):
    p1, p2, p3 = ports(3)
    env = dict(os.environ, RPBCAST_RUNTIME_DIR=str(tmp_path / "rt"))
    m = ["--transport", "unicast", "--member", f"1=127.0.0.1:{p1}", "--member", f"2=127.0.0.1:{p2}",
         "--member", f"3=127.0.0.1:{p3}/logger"]
    logger = subprocess.Popen(rp("logger", "--node-id", "3", "--bind", f"127.0.0.1:{p3}", "--dir",
                                 str(tmp_path / "log"), *m), env=env, stderr=subprocess.PIPE, text=True)
    sub = subprocess.Popen(rp("sub", "--node-id", "2", "--bind", f"127.0.0.1:{p2}", "--count", "20",
                              "--timeout", "20", "--format", "json", *m), env=env, stdout=subprocess.PIPE, text=True)
    try:
        sock = tmp_path / "rt" / "1-3.sock"
        end = time.time() + 15
        while not sock.exists() and time.time() < end:
            time.sleep(0.1)
        r = subprocess.run(rp("pub", "--node-id", "1", "--bind", f"127.0.0.1:{p1}", "--count", "20",
                              "--text", "tick", *m), env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        out, _ = sub.communicate(timeout=30)
        msgs = [json.loads(line) for line in out.splitlines()]
        assert sorted(x["seq"] for x in msgs) == list(range(20))
        assert all(x["sender"] == 1 and x["payload"] == "tick" for x in msgs)
        st = subprocess.run(rp("stat", "--socket", str(sock), "--once", "--json"), env=env,
                            capture_output=True, text=True, timeout=30)
        assert st.returncode == 0, st.stderr
        stats = json.loads(st.stdout)
        assert stats["role"] == "logger" and stats["node_id"] == 3
        assert stats["logged"] == 20
    finally:
        logger.terminate()
        logger.wait(timeout=20)
        sub.kill()


def test_stat_without_a_node_explains():
    r = subprocess.run(rp("stat", "--socket", "/nonexistent/x.sock", "--once"), capture_output=True, text=True)
    assert r.returncode == 1 and "is the node running" in r.stderr


def test_bad_config_is_a_clear_error(tmp_path):
    r = subprocess.run(rp("node", "--node-id", "1", "--bind", "localhost:5"), capture_output=True, text=True)
    assert r.returncode == 2 and "is not an IPv4 address" in r.stderr
    assert "Traceback" not in r.stderr


def test_selfcheck():
    r = subprocess.run(rp("selfcheck"), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "all passed" in r.stdout


def test_node_options_over_a_config_file(tmp_path):
    """A TOML file, then the options over it; --member ID=ADDR[/logger]."""
    import argparse

    from rpbcast.tools.node_options import add_node_options, config_from_args
    toml = tmp_path / "node.toml"
    toml.write_text('[rpbcast]\nnode_id = 1\nbind = "127.0.0.1:7401"\ntransport = "unicast"\n')
    p = argparse.ArgumentParser()
    add_node_options(p)
    args = p.parse_args(["-c", str(toml), "--node-id", "2", "--member", "1=127.0.0.1:7401",
                         "--member", "9=127.0.0.1:7409/logger"])
    cfg = config_from_args(args, gossip_interval=0.5)
    assert cfg.node_id == 2 and cfg.transport == "unicast" and cfg.gossip_interval == 0.5
    assert [(m.node_id, m.role) for m in cfg.members] == [(1, "member"), (9, "logger")]
