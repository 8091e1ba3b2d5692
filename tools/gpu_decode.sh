#!/usr/bin/env bash
# Decode measurements on the GPU machine in one run: the full-size model, the kernel timeline of one
# decode step (tools/kernel_trace), the GEMV bench, then decode at a few lengths with
# every lever on and once per lever switched off (--cuda-off), for the ablation table in
# docs/performance.md.
#   tools/gpu_decode.sh BIN_DIR [LENGTHS] [LEVERS]
# BIN_DIR holds qwick and optionally cuda_kernels_test, cuda_backend_test, gemv_cuda_bench and
# libqwick_kernel_trace.so (built here or carried; a lib/ beside them is put on LD_LIBRARY_PATH).
# LENGTHS default 512,4K,32K; LEVERS (space separated) default none.
# QWICK_KERNEL_FILTER: a gtest filter for cuda_kernels_test.
# Logs go to $OUT (default gpu-out); a short summary is printed last.
set -uo pipefail
lengths=${2:-512,4K,32K}
levers=${3:-}
source "$(dirname "$0")/gpu_env.sh" "$1"

gpu_test cuda_kernels_test ${QWICK_KERNEL_FILTER:+--gtest_filter=$QWICK_KERNEL_FILTER}
gpu_test cuda_backend_test
make_full_model

bench() {  # name, extra args...
  local name=$1 s
  shift
  s=$(stamp)
  "$bin/qwick" bench -m "$model" --device cuda --lengths "$lengths" --prefill-reps 1 --decode-reps 3 \
    --decode-tokens 32 --pp 0 --tg 0 "$@" >"$out/bench_$name.txt" 2>&1
  echo "bench $name rc=$? ($(($(stamp) - s)) s)"
}

if [[ -f "$bin/libqwick_kernel_trace.so" ]]; then  # one decode step's kernels at 4K context
  s=$(stamp)
  CUDA_INJECTION64_PATH=$bin/libqwick_kernel_trace.so QWICK_TRACE_OUT=$out/trace_4k.tsv \
    "$bin/qwick" bench -m "$model" --device cuda --lengths 4K --prefill-reps 1 --decode-reps 1 \
    --decode-tokens 16 --pp 0 --tg 0 >"$out/trace_4k.txt" 2>&1
  echo "trace rc=$? ($(($(stamp) - s)) s)"
fi
[[ -x "$bin/gemv_cuda_bench" ]] && "$bin/gemv_cuda_bench" >"$out/gemv_bench.txt" 2>&1

for rep in 1 2; do bench "all_on_$rep"; done
for lever in $levers; do bench "off_$lever" --cuda-off "$lever"; done

echo
[[ -f "$out/trace_4k.txt" ]] && grep -A40 "^kernel_trace" "$out/trace_4k.txt" | head -42
[[ -f "$out/trace_4k.tsv" ]] && python3 "$(dirname "$0")/kernel_trace/split_by_layer.py" "$out/trace_4k.tsv"
[[ -f "$out/gemv_bench.txt" ]] && tail -25 "$out/gemv_bench.txt"
for f in "$out"/bench_*.txt; do
  echo "== $(basename "$f" .txt)"
  grep -E "^\| +[0-9]" "$f" | cut -d'|' -f2,5-7
done
