"""``python -m rpbcast.tools.stress.bursts SPEC``: bursty loss for a stress
run, from a process of its own so the bursts keep their timing whatever the
orchestrator does.

Each namespace of SPEC["namespaces"] gets its own two-state (Gilbert-like)
channel: in a burst every UDP packet into it is dropped, between bursts
nothing is (the random --loss rule, if any, stays).  Burst lengths are
exponential with mean SPEC["len"] seconds, gaps exponential with mean
len * (1 - p) / p, so a fraction SPEC["p"] of the time is spent in bursts.
The DROP rule is toggled through a ``netns.Firewall`` (chain RPB_BURST)
within milliseconds.  Runs until stdin closes, then removes its rules and
prints {"bursts", "bad_s", "seconds"} as one JSON line.
"""
from __future__ import annotations

import json
import random
import sys
import threading
import time

from rpbcast.tools import netns
from rpbcast.tools.stress.faults import BURST_CHAIN

RULE = "-p udp -j DROP"


def main():
    spec = json.loads(sys.argv[1])
    p, mean_burst = float(spec["p"]), float(spec["len"])
    mean_gap = mean_burst * (1 - p) / p
    rng = random.Random(spec.get("seed", 0))
    names = spec["namespaces"]
    fws = [netns.Firewall(ns, chain=BURST_CHAIN) for ns in names]
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    t0 = time.monotonic()
    bad = [False] * len(fws)
    # start each channel in its stationary state
    switch_at = []
    for k in range(len(fws)):
        bad[k] = rng.random() < p
        switch_at.append(t0 + rng.expovariate(1 / (mean_burst if bad[k] else mean_gap)))
        if bad[k]:
            fws[k].set("burst", [RULE])
    bursts = sum(bad)
    bad_s = [0.0] * len(fws)
    since = [t0] * len(fws)
    try:
        while not stop.is_set():
            now = time.monotonic()
            k = min(range(len(fws)), key=switch_at.__getitem__)
            if switch_at[k] > now:
                stop.wait(min(switch_at[k] - now, 0.05))
                continue
            if bad[k]:
                bad_s[k] += now - since[k]
                fws[k].clear("burst")
            else:
                since[k] = now
                fws[k].set("burst", [RULE])
                bursts += 1
            bad[k] = not bad[k]
            switch_at[k] = now + rng.expovariate(1 / (mean_burst if bad[k] else mean_gap))
    finally:
        now = time.monotonic()
        for k, fw in enumerate(fws):
            if bad[k]:
                bad_s[k] += now - since[k]
            try:
                fw.clear()
            finally:
                fw.close()
        print(json.dumps({"bursts": bursts, "bad_s": sum(bad_s) / len(fws), "seconds": now - t0}), flush=True)


if __name__ == "__main__":
    main()
