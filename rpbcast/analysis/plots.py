"""PNG plots of the analysis results (matplotlib, Agg backend)."""
from __future__ import annotations

import os
from typing import List


def _plt():
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    return plt


def _ms(x):
    return None if x is None else x / 1e6


def latency_over_time(rows: List[dict], path: str, title: str, receive: List[dict] = ()):
    """Delivery latency percentiles per time bucket (receive p50/p99 in grey)."""
    plt = _plt()
    rows = sorted((r for r in rows if r["by"] == "bucket"), key=lambda r: r["key"])
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(8, 4))
    x = [r["bucket_start_s"] for r in rows]
    for k, style in (("p50", "-"), ("p90", "--"), ("p99", "-."), ("p99_9", ":"), ("max", "-")):
        ax.plot(x, [_ms(r[k]) for r in rows], style, label=k.replace("_", "."), lw=1.2 if k != "max" else 0.6)
    rx = sorted((r for r in receive if r["by"] == "bucket"), key=lambda r: r["key"])
    for k, style in (("p50", "-"), ("p99", "-.")):
        if rx:
            ax.plot([r["bucket_start_s"] for r in rx], [_ms(r[k]) for r in rx], style, color="grey", lw=0.8,
                    label=f"receive {k}")
    ax.set_yscale("log")
    ax.set_xlabel("send time from first send (s)")
    ax.set_ylabel("delivery latency (ms)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def latency_by(rows: List[dict], path: str, title: str):
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, by, label in ((axes[0], "sender", "sender"), (axes[1], "node", "receiver")):
        rs = sorted((r for r in rows if r["by"] == by), key=lambda r: r["key"])
        xs = list(range(len(rs)))
        w = 0.27
        for i, k in enumerate(("p50", "p99", "p99_9")):
            ax.bar([x + (i - 1) * w for x in xs], [_ms(r[k]) for r in rs], w, label=k.replace("_", "."))
        ax.set_xticks(xs, [str(r["key"]) for r in rs], fontsize=7)
        ax.set_xlabel(label)
        ax.set_ylabel("delivery latency (ms)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3, axis="y", which="both")
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def repair_histogram(rows: List[dict], path: str, title: str, per_decade: int = 10):
    """Repair latency distribution by source, from the fine histogram bins
    regrouped into `per_decade` log-spaced bins."""
    import math
    plt = _plt()
    rows = [r for r in rows if r["by"] == "source" and r["lo"] is not None and r["lo"] > 0]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(8, 4))
    for src in sorted({r["key"] for r in rows}):
        bins = {}
        for r in rows:
            if r["key"] == src:
                b = math.floor(math.log10(r["lo"]) * per_decade)
                bins[b] = bins.get(b, 0) + r["n"]
        lo, hi = min(bins), max(bins)
        counts = [bins.get(b, 0) for b in range(lo, hi + 1)]
        edges = [10 ** (b / per_decade) / 1e6 for b in range(lo, hi + 2)]
        ax.stairs(counts, edges, label=src)
    ax.set_xscale("log")
    ax.set_xlabel("repair latency: deliver - gap detected (ms)")
    ax.set_ylabel("ids")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def retransmission_load(nodes: List[dict], path: str, title: str):
    """Thesis Fig. 7-2: retransmissions served per node."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4))
    xs = list(range(len(nodes)))
    peer = [d["rtx_served"] - d["served_as_logger"] for d in nodes]
    logger = [d["served_as_logger"] for d in nodes]
    ax.bar(xs, peer, color="tab:blue", label="served as a peer (gossip)")
    ax.bar(xs, logger, bottom=peer, color="tab:red", label="served as a logger")
    ax.set_xticks(xs, [f"{d['node']}{'*' if d['role'] == 'logger' else ''}" for d in nodes], fontsize=7)
    ax.set_xlabel("node (* = logger)")
    ax.set_ylabel("retransmissions served")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def overhead(rows: List[dict], path: str, title: str):
    """Thesis Figs. 7-6/7-7 (one run): bytes sent per data byte, by type."""
    plt = _plt()
    rs = [r for r in rows if r["type"] not in ("data", "pad") and r["bytes_per_data_byte"] is not None]
    if not rs:
        return None
    fig, ax = plt.subplots(figsize=(8, 4))
    colors = ["tab:gray" if r["type"] == "non_repair" else ("tab:orange" if r["type"] == "repair" else "tab:blue")
              for r in rs]
    ax.bar(range(len(rs)), [r["bytes_per_data_byte"] for r in rs], color=colors)
    ax.set_xticks(range(len(rs)), [r["type"] for r in rs], rotation=30, fontsize=8)
    ax.set_ylabel("bytes sent per data byte")
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def overhead_vs(points: List[dict], xkey: str, path: str, title: str):
    """Non-repair overhead per data byte against a run parameter, one line
    per protocol (several runs: the shape of thesis Figs. 7-6, 7-7)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    for proto in sorted({p["protocol"] for p in points}):
        ps = sorted((p for p in points if p["protocol"] == proto), key=lambda p: p["x"])
        ax.plot([p["x"] for p in ps], [p["non_repair_per_data_byte"] for p in ps], "o-", label=proto)
    ax.set_xlabel(xkey)
    ax.set_ylabel("non-repair overhead (bytes per data byte)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def available():
    try:
        _plt()
        return True
    except ImportError:
        return False


def ensure_dir(d):
    os.makedirs(d, exist_ok=True)
    return d
