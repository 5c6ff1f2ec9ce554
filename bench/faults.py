"""The fault campaign, long: `rpbcast stress` under every fault users met,
with a logger and without, several runs each, written as a table into
docs/reliability.md (root: the runs make network namespaces).

    sudo python bench/faults.py [--reps 3] [--quick] [--json out.json] [--no-write]

Each row is a fault; the columns: how many runs delivered exactly once,
the catch-up time after the fault ended (until every receiver had
everything sent before it ended; median), repairs served per id found
missing (median), the peak RSS of each role (largest over the runs) and
its ratio to the fault-free run of the same set-up, and what the protocol
reported (receivers released from flow control, ids declared lost).  The
scenarios are interleaved run by run (rep 1 of every scenario, then rep 2,
...) so a change in the shared machine's load hits them all alike; the
fault-free rows are the same-run baseline.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from harness import machine  # noqa: E402

DOC = os.path.join(ROOT, "docs", "reliability.md")
BEGIN, END = "<!-- faults-table -->", "<!-- /faults-table -->"

# --hosts, paced below the machine's line rate so the faults, not the CPU,
# decide; 1 % per-packet loss keeps repairs in flight whenever a fault hits.
HOSTS = ["--hosts", "--receivers", "2", "--rate", "200000", "--duration", "6", "--loss", "0.01",
         "--timeout", "60"]

# (name, the options that make the fault, which logger set-ups)
SCENARIOS = [
    ("no fault", [], (1, 0)),
    ("partition of a receiver, 2 s", ["--partition", "3:2:2"], (1, 0)),
    ("receiver away 10 s (partition)", ["--partition", "3:1:10"], (1, 0)),
    ("receiver killed, restarted 0.2 s later", ["--kill", "receiver:2:1.5:0.2"], (1, 0)),
    ("sender stopped 1.5 s (SIGSTOP)", ["--pause-sender", "2:1.5"], (1, 0)),
    ("unicast blackout 1 s", ["--blackout", "2:1"], (1, 0)),
    ("bursty loss, 5 % of the time in 50 ms bursts", ["--burst-loss", "0.05:0.05"], (1, 0)),
    ("logger killed, restarted 0.5 s later", ["--kill", "logger:2:0.5"], (1,)),
    ("sender killed, restarted 0.5 s later", ["--kill", "sender:2:0.5"], (1, 0)),
]

# The users' own commands, on one loopback at line rate.
LOOPBACK = [
    ("line rate, no fault (loopback)", ["--duration", "5"], (0,)),
    ("line rate, --kill-receiver 1.5 (loopback)", ["--kill-receiver", "1.5", "--timeout", "30"], (1,)),
]


def stress(args, timeout=600):
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "rpbcast", "stress", "--json", "--quiet", *args],
                       capture_output=True, text=True, timeout=timeout)
    try:
        s = json.loads(r.stdout)
    except ValueError:
        return {"error": (r.stderr or r.stdout)[-400:], "exit": r.returncode, "wall_s": time.time() - t0}
    s["exit"] = r.returncode
    return s


def run_all(reps, quick):
    scen = SCENARIOS + LOOPBACK
    if quick:
        scen = [s for s in scen if s[0] in ("no fault", "sender stopped 1.5 s (SIGSTOP)", "unicast blackout 1 s")]
    runs = {}
    for rep in range(reps):
        for name, opts, setups in scen:
            for loggers in setups:
                base = HOSTS if not name.endswith("(loopback)") else []
                if quick and base:
                    base = [a if a != "6" else "3" for a in base]
                args = base + ["--loggers", str(loggers)] + opts
                s = stress(args)
                runs.setdefault((name, loggers), {"args": args, "runs": []})["runs"].append(s)
                ok = s.get("exactly_once")
                print(f"  rep {rep + 1}/{reps}  {name:<46} loggers={loggers}  exactly once: {ok}  "
                      f"({s.get('wall_s', 0):.1f} s)", file=sys.stderr, flush=True)
    return runs


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarize(runs):
    rows = []
    base_rss = {}
    for (name, loggers), r in runs.items():
        good = [s for s in r["runs"] if "error" not in s]
        rss = {}
        for s in good:
            for role, kb in (s.get("rss_peak_kb_by_role") or {}).items():
                rss[role] = max(rss.get(role, 0), kb)
        # the baseline of a row: the fault-free row of the same mode and loggers
        mode = "loopback" if name.endswith("(loopback)") else "hosts"
        if name == "no fault" or name.startswith("line rate, no fault"):
            base_rss[(mode, loggers)] = rss
        catch = [next((f.get("catch_up_s") for f in s.get("faults", []) if f.get("catch_up_s") is not None), None)
                 for s in good]
        rows.append({
            "fault": name, "loggers": loggers, "mode": mode,
            "caught_up": sum(1 for c in catch if c is not None), "args": " ".join(r["args"]),
            "runs": len(r["runs"]), "exactly_once": sum(1 for s in good if s.get("exactly_once")),
            "catch_up_s": _median(catch), "served_per_missing": _median([s.get("served_per_missing") for s in good]),
            "rss_mib": {k: round(v / 1024) for k, v in rss.items()},
            "released": sum(len(s.get("released") or []) for s in good),
            "lost_ids": sum(sum((s.get("lost_ids") or {}).values()) for s in good),
            "missing": sum(sum(c.get("missing", 0) for c in (s.get("problems") or {}).values()
                               if isinstance(c, dict)) for s in good),
            "errors": [s["error"] for s in r["runs"] if "error" in s],
            "send_rate": _median([s.get("send_rate") for s in good]),
        })
    for row in rows:
        b = base_rss.get((row["mode"], row["loggers"])) or {}
        row["rss_ratio"] = {k: round(v * 1024 / b[k], 2) for k, v in row["rss_mib"].items() if b.get(k)}
    return rows


def table(rows):
    out = ["| fault | logger | exactly once | catch-up after the fault ends | served / missing | "
           "peak RSS MiB (sender / receiver / logger) | × fault-free | released, lost, missing |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        rss = r["rss_mib"]
        ratio = r["rss_ratio"]
        roles = ("sender", "receiver", "logger")
        out.append(
            f"| {r['fault']} | {'yes' if r['loggers'] else 'no'} | {r['exactly_once']}/{r['runs']} | "
            + (f"{r['catch_up_s']:.2f} s" if r["catch_up_s"] is not None else "-")
            + (f" ({r['caught_up']}/{r['runs']} caught up)" if r["catch_up_s"] is not None
               and r["caught_up"] < r["runs"] else "") + " | "
            + (f"{r['served_per_missing']:.1f}" if r["served_per_missing"] is not None else "-") + " | "
            + " / ".join(str(rss[k]) if k in rss else "-" for k in roles) + " | "
            + " / ".join(f"{ratio[k]:.2f}" if k in ratio else "-" for k in roles) + " | "
            + f"{r['released']}, {r['lost_ids']:,}, {r['missing']:,}"
            + (f" ({len(r['errors'])} runs without a summary)" if r["errors"] else "") + " |")
    return "\n".join(out)


def write_doc(rows, reps, argv):
    m = machine()
    text = "\n".join([
        BEGIN,
        f"Measured {m['date']} on {m['cpu']}, {m['cores']} cores, kernel {m['kernel']}, Python {m['python']} "
        f"(a shared, noisy VM), with `sudo python bench/faults.py {' '.join(argv)}`.  "
        f"{reps} runs per row, interleaved.  --hosts rows: `rpbcast stress {' '.join(HOSTS)}` plus the fault; "
        "the loopback rows are the users' own commands.",
        "",
        table(rows),
        "",
        "Commands, row by row: " + "; ".join(f"`{r['args']}`" for r in rows) + ".",
        END,
    ])
    doc = open(DOC).read()
    if BEGIN in doc and END in doc:
        doc = doc[:doc.index(BEGIN)] + text + doc[doc.index(END) + len(END):]
    else:
        doc = doc.rstrip() + "\n\n" + text + "\n"
    with open(DOC, "w") as f:
        f.write(doc)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="three scenarios, 3 s each (a smoke run)")
    ap.add_argument("--json", help="also write every run's summary here")
    ap.add_argument("--no-write", action="store_true", help="do not touch docs/reliability.md")
    ap.add_argument("--from-json", help="no runs: the table from a --json file of an earlier run")
    a = ap.parse_args()
    if a.from_json:
        saved = json.load(open(a.from_json))
        runs = {tuple(k.rsplit(" / loggers=", 1)[:1]) + (int(k.rsplit("=", 1)[1]),): v
                for k, v in saved["runs"].items()}
        rows = summarize(runs)
        print(table(rows))
        if not a.no_write:
            argv = saved["argv"][1:]
            write_doc(rows, max(len(v["runs"]) for v in runs.values()), argv)
        return
    if os.geteuid() != 0:
        sys.exit("bench/faults.py needs root: every run makes network namespaces")
    runs = run_all(a.reps, a.quick)
    rows = summarize(runs)
    print(table(rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": machine(), "argv": sys.argv,
                       "runs": {f"{k[0]} / loggers={k[1]}": v for k, v in runs.items()}, "rows": rows},
                      f, indent=1, default=str)
    if not a.no_write and not a.quick:
        write_doc(rows, a.reps, sys.argv[1:])


if __name__ == "__main__":
    main()
