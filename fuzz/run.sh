#!/usr/bin/env bash
# Fuzz the wire v1 decoder with atheris (libFuzzer), or the engine with valid
# keyed datagrams.  See fuzz/README.md.
#
#   fuzz/run.sh plain SECONDS   normal in-tree build; feedback from the Python harness only
#   fuzz/run.sh cmp   SECONDS   scratch build with -fsanitize-coverage=trace-cmp:
#                               libFuzzer's value profile sees every comparison in csrc/
#   fuzz/run.sh asan  SECONDS   scratch build with ASan+UBSan (RPBCAST_DEBUG=1): replays
#                               the corpus, then mutates it (coverage-blind, see README)
#   fuzz/run.sh engine SECONDS  the engine fuzzer (fuzz_engine.py: valid, sealed datagrams
#                               into a keyed group) on the core built under ASan+UBSan;
#                               extra arguments go to fuzz_engine.py (--seed N, ...)
#
# Scratch copies, corpus and crash artifacts live under $FUZZ_WORK
# (default /tmp/rpbcast-fuzz); the source tree is never built into except by
# `plain`, which uses it as it is.  Extra arguments go to libFuzzer.
set -euo pipefail
mode=${1:?usage: fuzz/run.sh plain|cmp|asan|engine SECONDS [args]}
secs=${2:?seconds}
shift 2
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${FUZZ_WORK:-/tmp/rpbcast-fuzz}
py=$(python3 -c 'import sys; print(sys.executable)')   # the real binary, not a shim
mkdir -p "$work/corpus" "$work/artifacts"
if [ "$mode" = engine ]; then      # no atheris needed: a seeded standalone fuzzer
  exec "$py" "$repo/fuzz/sanitized.py" --work "$work" fuzz_engine.py --seconds "$secs" \
    --artifacts "$work/artifacts" "$@"
fi
[ -d "$work/seeds" ] || PYTHONPATH="$repo" "$py" "$repo/fuzz/fuzz_wire.py" --seeds "$work/seeds"

scratch() {   # scratch copy of the repo built with extra flags: scratch NAME ENV...
  local dir="$work/$1"; shift
  if [ ! -f "$dir/.built" ]; then
    rm -rf "$dir"; mkdir -p "$dir"
    (cd "$repo" && tar --exclude=./build --exclude='*.so' --exclude=./.git -cf - .) | (cd "$dir" && tar -xf -)
    rm -f "$dir"/rpbcast/*.c
    (cd "$dir" && env "$@" "$py" setup.py -q build_clib build_ext --inplace >build.log 2>&1)
    touch "$dir/.built"
  fi
  echo "$dir"
}

args=("$work/corpus" "$work/seeds" -max_total_time="$secs" -max_len=4096
      -artifact_prefix="$work/artifacts/" "$@")
case "$mode" in
  plain)
    exec env PYTHONPATH="$repo" "$py" "$repo/fuzz/fuzz_wire.py" "${args[@]}" ;;
  cmp)
    dir=$(scratch cmp CFLAGS=-fsanitize-coverage=trace-cmp)
    gcc -shared -fPIC -O2 -o "$work/covshim.so" "$repo/fuzz/covshim.c"
    exec env LD_PRELOAD="$work/covshim.so" PYTHONPATH="$dir" \
      "$py" "$repo/fuzz/fuzz_wire.py" "${args[@]}" -use_value_profile=1 ;;
  asan)
    dir=$(scratch asan RPBCAST_DEBUG=1)
    exec env LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)" \
      ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
      UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      PYTHONMALLOC=malloc PYTHONPATH="$dir" \
      "$py" "$repo/fuzz/fuzz_wire.py" "${args[@]}" -keep_seed=1 ;;
  *) echo "unknown mode $mode" >&2; exit 2 ;;
esac
