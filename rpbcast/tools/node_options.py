"""The options every node command (node, logger, pub, sub) takes, the
Config they make (over an optional TOML file), and the node opened with
its stats socket."""
from __future__ import annotations

import os

from rpbcast.tools.stats import STATS_DIR, stats_path


def add_node_options(p):
    p.add_argument("-c", "--config", help="TOML file ([rpbcast] table, see docs/api.md)")
    p.add_argument("--node-id", type=int)
    p.add_argument("--bind", help="unicast address a.b.c.d:port")
    p.add_argument("--group", dest="group_addr", help="multicast group a.b.c.d:port")
    p.add_argument("--interface")
    p.add_argument("--transport", choices=["multicast", "unicast"])
    p.add_argument("--ttl", type=int, help="multicast TTL (default 1: hosts on the interface's link; 0: this host)")
    p.add_argument("--member", action="append", default=[], metavar="ID=ADDR[/logger]",
                   help="a member of the group (repeat); e.g. 2=127.0.0.1:7402 or 9=127.0.0.1:7409/logger")
    p.add_argument("--join", action="store_true", help="join dynamically through sponsors instead")
    p.add_argument("--no-stats-socket", action="store_true", help=f"do not serve counters under {STATS_DIR}")


def config_from_args(args, **over):
    """The config file's [rpbcast] table, then the options, then `over`."""
    from rpbcast.config import Config, ConfigError
    d = {}
    if args.config:
        from rpbcast.config import read_toml
        raw = read_toml(args.config)
        d = dict(raw.get("rpbcast", raw))
    for key in ("node_id", "bind", "group_addr", "interface", "transport", "ttl"):
        v = getattr(args, key, None)
        if v is not None:
            d[key] = v
    if getattr(args, "join", False):
        d["join"] = True
    members = list(d.get("members", []))
    for spec in getattr(args, "member", []):
        try:
            ident, rest = spec.split("=", 1)
            role = "member"
            if rest.endswith("/logger"):
                rest, role = rest[: -len("/logger")], "logger"
            members.append({"node_id": int(ident), "addr": rest, "role": role})
        except ValueError:
            raise ConfigError(f"--member must look like ID=ADDR or ID=ADDR/logger, got {spec!r}") from None
    if members:
        d["members"] = members
    d.update(over)
    if "node_id" not in d:
        raise ConfigError("a node id is needed: --node-id N (or node_id in the config file)")
    return Config.from_dict(d)


def open_node(args, streams=None, **over):
    """The node the options describe, serving its counters on its stats
    socket unless --no-stats-socket; streams: the stream ids it delivers
    (None: every stream)."""
    from rpbcast import api
    cfg = config_from_args(args, **over)
    sock = None
    if not getattr(args, "no_stats_socket", False):
        os.makedirs(STATS_DIR, exist_ok=True)
        sock = stats_path(cfg.group, cfg.node_id)
    return api.Node(cfg, stats_socket=sock, streams=streams)
