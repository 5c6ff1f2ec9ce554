#!/usr/bin/env bash
# bench/oneway_stalls.sh - bench/oneway_stalls.py (one way at a fixed rate:
# stages, and what the messages over 1 ms coincided with) in several modes,
# interleaved, in a namespace of its own: bench/oneway_modes.sh with that
# bench.  As root:
#     RATE=100000 DURATION=3 REPS=3 bench/oneway_stalls.sh "|" "--pin|--pin --receive-mode spin"
NS=${NS:-rpb-stalls} BENCH=oneway_stalls exec "$(dirname "$0")/oneway_modes.sh" "$@"
