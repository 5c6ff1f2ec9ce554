#!/usr/bin/env bash
# bench/oneway_modes.sh - bench/oneway_rate.py (one way at a fixed rate,
# broken down) in several modes, interleaved (A B A B ...), inside a network
# namespace of its own.  A mode is "SENDER FLAGS|RECEIVER FLAGS"; starting
# with @TREE it runs TREE's checkout (A/B against another build; this
# tree's script).  BENCH=oneway_stalls runs bench/oneway_stalls.py instead
# (bench/oneway_stalls.sh).  As root:
#     RATE=100000 DURATION=3 REPS=3 bench/oneway_modes.sh "|" "--no-own-filter|--no-own-filter"
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
NS=${NS:-rpb-oneway}
BENCH=${BENCH:-oneway_rate}
REPS=${REPS:-3}
RATE=${RATE:-100000}
SECONDS_=${DURATION:-3}
ip netns list | grep -qw "^$NS" || ip netns add "$NS"
ip netns exec "$NS" ip link set lo up
ip netns exec "$NS" ip link set lo multicast on
ip netns exec "$NS" ip route replace 224.0.0.0/4 dev lo
run() {  # mode
    local out; out=$(mktemp)
    local tree=$HERE mode=$1
    case "$mode" in @*) tree=${mode%% *}; tree=${tree#@}; mode=${mode#@"$tree"}; mode=${mode# }; ;; esac
    local sflags=${mode%%|*} rflags=${mode#*|}
    ip netns exec "$NS" env PYTHONPATH="$tree" python3 "$HERE/bench/$BENCH.py" recv "$((SECONDS_ + 3))" $rflags >"$out" 2>&1 &
    local rp=$!
    for _ in $(seq 200); do grep -q READY "$out" && break; sleep 0.05; done
    ip netns exec "$NS" env PYTHONPATH="$tree" python3 "$HERE/bench/$BENCH.py" send "$RATE" "$SECONDS_" $sflags >/dev/null 2>&1
    wait "$rp"
    grep -E "RESULT|TAIL|GAPS|CTXSW|LOOP|CONTROL" "$out" | sed "s#^#mode=[$1] #"
    rm -f "$out"
}
for rep in $(seq "$REPS"); do
    for mode in "$@"; do run "$mode"; done
done
[ "${KEEP_NS:-0}" = 1 ] || ip netns del "$NS"
