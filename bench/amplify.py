"""Amplification table (docs/security.md, "Amplification").

Three members and a logger (unkeyed, real sockets, a network namespace),
3,000 messages of 1 kB held and logged; then requests from a socket at an
address outside the member list (standing for a spoofed victim), and the
bytes that come back to it within 0.5 s of quiet.  Prints one row per
request: bytes sent, bytes back, ratio; and, after the cookie (the PING's
nonce) was echoed, the ratio of the same 1472-byte RTX to the logger.

    sudo python3 bench/amplify.py [--amplify-factor 3]

(--amplify-factor 0 turns the cap off: the "before" column.)
"""
import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from rpbcast.tools import netns  # noqa: E402
import test_hostile_amplify as t  # noqa: E402


def run(factor):
    rows = []
    with tempfile.TemporaryDirectory() as tmp, netns.namespace() as ns, netns.entered(ns):
        extra = {} if factor is None else {"amplify_factor": factor}
        nodes, ports, logger = t.group(Path(tmp), extra)
        try:
            t.publish(nodes[1], 3000)
            for i in (2, 3):
                t.received(nodes[i], 3000)
            time.sleep(0.3)
            inc1 = nodes[1].incarnation
            streams = [(i, n.incarnation) for i, n in nodes.items()]
            cases = [
                ("one 1472-byte RTX to the logger", lambda a: [t.rtx(1, inc1, 1472)], ports[logger]),
                ("16 kB of RTX (12 datagrams) to the logger", lambda a: [t.rtx(1, inc1, 1400)] * 12,
                 ports[logger]),
                ("one 1472-byte RTX to the sender", lambda a: [t.rtx(1, inc1, 1472)], ports[1]),
                ("a GOSSIP pull to a member", lambda a: [t.gossip(streams)], ports[2]),
                ("a JOIN to a member", lambda a: [t.join(a.port)], ports[3]),
            ]
            for what, make, port in cases:
                att = t.Attacker()
                try:
                    r, back = t.ratio_of(att, make(att), port)
                    rows.append((what, att.sent, back, r))
                finally:
                    att.close()
            att = t.Attacker()
            try:
                t.ratio_of(att, [t.rtx(1, inc1, 1472)], ports[logger])
                att.echo_cookies()
                time.sleep(0.1)
                att.sent = 0
                r, back = t.ratio_of(att, [t.rtx(1, inc1, 1472)], ports[logger])
                rows.append(("the same RTX after the cookie was echoed", att.sent, back, r))
            finally:
                att.close()
        finally:
            for n in nodes.values():
                n.close()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--amplify-factor", type=float, default=None,
                    help="Config.amplify_factor (default: the Config default; 0: no cap)")
    a = ap.parse_args()
    print(f"| request (from a non-member address) | bytes sent | bytes back | ratio |")
    print(f"|---|---:|---:|---:|")
    for what, sent, back, r in run(a.amplify_factor):
        print(f"| {what} | {sent:,} | {back:,} | {r:,.1f}x |")


if __name__ == "__main__":
    main()
