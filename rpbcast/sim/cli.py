"""`rpbcast sim`: run one simulated configuration and print the results.

    rpbcast sim                                   # the thesis set-up, rpbcast, no loss
    rpbcast sim --loss 0.01 --total-rate 360      # §7.2's load-distribution run
    rpbcast sim --topology tree --nodes 1000 --senders 10 --messages 10000 --total-rate 1000
    rpbcast sim --set gossip_interval=0.1 --set selection=uniform --json
    rpbcast sim --run-dir runs/x --trace          # run.json, counters, links.json, nodes.json, traces/
    rpbcast sim --show-topology                   # print the topology and exit
"""
from __future__ import annotations

import ast
import json
import sys


def _value(text):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def add_parsers(sub):
    p = sub.add_parser("sim", help="simulate one configuration (topology, loss, workload, protocol)",
                       description="Run one configuration in the deterministic network simulator "
                                   "(docs/simulator.md) and print its results.")
    p.add_argument("--protocol", default=None, help="rpbcast (default) or a registered baseline")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--topology", choices=["transit-stub", "tree"], default=None)
    p.add_argument("--topo-seed", type=int, default=None, help="transit-stub generator seed (default: the fixed thesis seed)")
    p.add_argument("--nodes", type=int, default=None, help="tree: number of nodes")
    p.add_argument("--degree", type=int, default=None, help="tree: most neighbours per node")
    p.add_argument("--members", type=int, default=None, help="members (default: every host)")
    p.add_argument("--senders", default=None, help="'all', a count, or a comma-separated list of nodes")
    p.add_argument("--logger", default=None, help="'auto', 'none', or a node")
    p.add_argument("--rate", type=float, default=None, help="messages/s per sender")
    p.add_argument("--total-rate", type=float, default=None, help="messages/s over all senders")
    p.add_argument("--messages", type=int, default=None, help="total messages")
    p.add_argument("--duration", type=float, default=None, help="seconds of sending")
    p.add_argument("--size", type=int, default=None, help="payload bytes")
    p.add_argument("--loss", type=float, default=None)
    p.add_argument("--loss-model", choices=["uniform", "gilbert"], default=None)
    p.add_argument("--loss-burst", type=float, default=None, help="Gilbert-Elliott mean burst (packets)")
    p.add_argument("--loss-where", choices=["receiver", "link"], default=None)
    p.add_argument("--queue-limit", type=int, default=None, help="packets per link direction (0 = unlimited)")
    p.add_argument("--bandwidth", type=float, default=None, help="bits/s per link direction")
    p.add_argument("--repair-rate", type=float, default=None, help="repairs/s a node serves (0 = unlimited)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any simulation or engine Config parameter (repeatable)")
    p.add_argument("--run-dir", default=None, help="write run.json, counters, links.json, nodes.json here")
    p.add_argument("--trace", action="store_true", help="with --run-dir: per-node event traces (Parquet)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--links", action="store_true", help="also print per-link traffic")
    p.add_argument("--show-topology", action="store_true", help="print the topology and exit")
    p.set_defaults(func=main)


def params_from_args(args) -> dict:
    params = {}
    simple = {"protocol": "protocol", "seed": "seed", "topology": "topology", "topo_seed": "topo_seed",
              "nodes": "nodes", "degree": "degree", "members": "members", "rate": "rate",
              "total_rate": "total_rate", "messages": "messages", "duration": "duration", "size": "size",
              "loss": "loss", "loss_model": "loss_model", "loss_burst": "loss_burst",
              "loss_where": "loss_where", "queue_limit": "queue_limit", "bandwidth": "bandwidth",
              "repair_rate": "repair_rate", "run_dir": "run_dir"}
    for attr, key in simple.items():
        v = getattr(args, attr)
        if v is not None:
            params[key] = v
    if args.senders is not None:
        s = args.senders
        params["senders"] = "all" if s == "all" else (int(s) if s.isdigit() else [int(x) for x in s.split(",")])
    if args.logger is not None:
        params["logger"] = None if args.logger == "none" else ("auto" if args.logger == "auto" else int(args.logger))
    if args.trace:
        params["trace"] = True
    for kv in args.set:
        if "=" not in kv:
            raise SystemExit(f"--set wants KEY=VALUE, got {kv!r}")
        k, v = kv.split("=", 1)
        params[k.strip()] = _value(v.strip())
    return params


def _fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def print_results(r: dict):
    lat = (lambda k: "-" if r.get(k) is None else f"{r[k] * 1e3:.2f} ms")
    lines = [
        f"rpbcast sim: {r['protocol']} on {r['topology']}, {r['members']} members "
        f"({r['senders']} senders, loggers {r['loggers'] or 'none'}), seed {r['seed']}",
        f"  messages       {r['published']:,} published, {r['delivered']:,}/{r['expected']:,} deliveries, "
        f"missing {r['missing']:,}, duplicates {r['duplicates']:,}, exactly once: {'yes' if r['exactly_once'] else 'NO'}",
        f"  repairs        {r['repairs_peer']:,} by peers, {r['repairs_logger']:,} by loggers "
        f"(loggers served {r['served_by_loggers']:,}, busiest member {r['served_max_member']:,}, "
        f"rate-limited {r['serve_limited']:,})",
        f"  latency        per delivery mean {lat('lat_mean')}, p99 {lat('lat_p99')}; "
        f"to all receivers mean {lat('lat_all_mean')} (sd {lat('lat_all_std')}), max {lat('lat_all_max')}",
        f"  overhead       {r['overhead_bytes']:,} bytes in {r['overhead_msgs']:,} control messages; "
        f"repairs {r['repair_bytes']:,} bytes; data {r['data_bytes']:,} bytes",
        f"  network        {r['link_pkts']:,} link packets, {r['link_bytes']:,} bytes, busiest link "
        f"{r['link_bytes_max']:,} bytes; queue drops {r['queue_drops']:,}, max queue {r['max_queue']}, "
        f"lost {r['rx_lost'] + r['link_lost']:,}",
        f"  time           {r['sim_time']:.3f} s simulated (sending until {r['send_end']:.3f} s, complete at "
        f"{_fmt(r['completed_at'])} s); wall {r['wall_s']:.2f} s "
        f"(build {r['build_s']:.2f}, run {r['run_s']:.2f}); {r['events']:,} events",
        f"  hash           deliveries {r['delivery_hash']}, state {r['state_hash']}",
    ]
    types = sorted(k[5:] for k in r if k.startswith("msgs_") and k != "msgs_everywhere")
    if types:
        lines.append("  by type        " + ", ".join(f"{t} {r['msgs_' + t]:,} ({r['bytes_' + t]:,} B)" for t in types))
    print("\n".join(lines))


def main(args):
    from rpbcast.sim.run import Simulation
    params = params_from_args(args)
    if args.show_topology:
        from rpbcast.sim.build import make_topology
        from rpbcast.sim.params import resolve
        print(make_topology(resolve(params)).describe())
        return 0
    sim = Simulation(params)
    r = sim.run()
    if args.json:
        out = dict(r)
        if args.links:
            out["links"] = sim.link_table()
        print(json.dumps(out, indent=1, default=str))
    else:
        print_results(r)
        if args.links:
            print("  links (directed): a->b  packets  bytes  data/repair/control pkts  drops  max-queue  util")
            for row in sim.link_table():
                if row["pkts"] or row["drops"]:
                    print(f"    {row['a']:4d}->{row['b']:<4d} {row['pkts']:9,d} {row['bytes']:12,d}  "
                          f"{row['data_pkts']}/{row['repair_pkts']}/{row['control_pkts']}  {row['drops']}  "
                          f"{row['max_queue']}  {row['utilisation']:.4f}")
    return 0 if r["exactly_once"] else 1


if __name__ == "__main__":                  # pragma: no cover
    import argparse
    ap = argparse.ArgumentParser(prog="rpbcast")
    add_parsers(ap.add_subparsers(dest="cmd", required=True))
    a = ap.parse_args(["sim"] + sys.argv[1:])
    sys.exit(a.func(a))
