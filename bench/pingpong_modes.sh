#!/usr/bin/env bash
# bench/pingpong_modes.sh - bench/pingpong.py in several modes, interleaved
# (A B C A B C ...), inside a network namespace of its own (loopback
# multicast), printing each run's RESULT and STAGES lines.  As root:
#     REPS=3 COUNT=5000 bench/pingpong_modes.sh "" "--timestamps" "--inline" "--inline --spin"
# LOSS=0.01 drops 1 % of the datagrams in the namespace (iptables).
# A mode starting with @TREE runs TREE's bench/pingpong.py on TREE's build
# (A/B against another checkout in the same run):
#     bench/pingpong_modes.sh "@../main" "" "--spin-us 20"
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
NS=${NS:-rpb-pingpong}
REPS=${REPS:-3}
COUNT=${COUNT:-5000}
SIZE=${SIZE:-64}
ip netns list | grep -qw "^$NS" || ip netns add "$NS"
ip netns exec "$NS" ip link set lo up
ip netns exec "$NS" ip link set lo multicast on
ip netns exec "$NS" ip route replace 224.0.0.0/4 dev lo
# LOSS=0.01: drop that share of the datagrams arriving in the namespace
# (iptables statistic; the round trip's tail under repair)
if [ -n "${LOSS:-}" ]; then
    IPT=$(PYTHONPATH="$HERE" python3 -c 'from rpbcast.tools import netns; print(netns.iptables_bin())')
    ip netns exec "$NS" "$IPT" -F INPUT
    ip netns exec "$NS" "$IPT" -A INPUT -m statistic --mode random --probability "$LOSS" -j DROP
fi
run() {  # mode flags
    local out; out=$(mktemp)
    local tree=$HERE flags=$1
    case "$flags" in @*) tree=${flags%% *}; tree=${tree#@}; flags=${flags#@"$tree"}; ;; esac
    ip netns exec "$NS" env PYTHONPATH="$tree" python3 "$tree/bench/pingpong.py" pong 60 $flags >"$out" 2>&1 &
    local pp=$!
    for _ in $(seq 100); do grep -q READY "$out" && break; sleep 0.05; done
    ip netns exec "$NS" env PYTHONPATH="$tree" python3 "$tree/bench/pingpong.py" ping "$COUNT" "$SIZE" $flags \
        | sed "s|^|mode=[${1:-threaded}] |"
    kill "$pp" 2>/dev/null; wait "$pp" 2>/dev/null; rm -f "$out"
}
for rep in $(seq "$REPS"); do
    for mode in "$@"; do run "$mode"; done
done
[ "${KEEP_NS:-0}" = 1 ] || ip netns del "$NS"
