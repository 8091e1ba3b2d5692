#!/usr/bin/env bash
# Prefill measurements on the GPU machine in one run: the kernel tests, the full-size model, then
# `qwick bench` at a few lengths with the per-stage split, once with every prefill lever on and once
# per lever switched off (--cuda-off), for the ablation table in docs/performance.md.
#   tools/gpu_prefill.sh BIN_DIR [LENGTHS] [LEVERS]
# BIN_DIR holds qwick and optionally cuda_kernels_test and cuda_backend_test (built here or carried; a
# lib/ beside them is put on LD_LIBRARY_PATH). LENGTHS default 512,4K,32K; LEVERS (space separated
# --cuda-off names, backend/cuda/cuda_options.h) default the one that acts on prefill, overlap.
# Logs go to $OUT (default gpu-out); a short summary is printed last.
set -uo pipefail
lengths=${2:-512,4K,32K}
levers=${3:-overlap}
source "$(dirname "$0")/gpu_env.sh" "$1"

gpu_test cuda_kernels_test
gpu_test cuda_backend_test
make_full_model

if [[ "${QWICK_EVALS:-0}" == 1 ]]; then  # CUDA vs CPU logits over 300 positions, as gpu_check.sh full
  python3 "$(dirname "$0")/eval_tokens.py" /tmp/tokens.safetensors
  t=$(stamp)
  echo "cpu: $(timeout 300 "$bin/qwick" eval -m $model --device cpu --tokens /tmp/tokens.safetensors \
    --out /tmp/cpu_logits.safetensors 2>&1 | tail -1) ($(($(stamp) - t)) s)"
  for variant in "prefill:" "prefill200+decode100:--decode-from 200" "chunk64:--chunk 64" \
    "prefill, every lever off:--cuda-off $(echo $levers | tr ' ' ,)"; do
    name=${variant%%:*} args=${variant#*:}
    # shellcheck disable=SC2086
    echo "cuda $name: $(timeout 120 "$bin/qwick" eval -m $model --device cuda --tokens /tmp/tokens.safetensors \
      --reference /tmp/cpu_logits.safetensors $args 2>&1 | tail -1)"
  done
fi

bench() {  # name, extra args...
  local name=$1
  shift
  t=$(stamp)
  "$bin/qwick" bench -m "$model" --device cuda --lengths "$lengths" --prefill-reps 3 --rep-budget 6 \
    --decode-reps 1 --decode-tokens 4 --pp 0 --tg 0 --json "$out/bench_$name.json" "$@" >"$out/bench_$name.txt" 2>&1
  echo "bench $name rc=$? ($(($(stamp) - t)) s)"
}
bench all_on --stages
for lever in $levers; do bench "off_$lever" --cuda-off "$lever"; done
if [[ -n "${QWICK_LONG:-}" ]]; then  # one long prompt, every lever on and every lever off
  lengths=$QWICK_LONG
  bench long_all_on
  bench long_all_off --cuda-off "$(echo $levers | tr ' ' ,)"
fi

echo
for f in "$out"/bench_*.txt; do
  echo "== $(basename "$f" .txt)"
  grep -E "^\| +[0-9]" "$f" | cut -d'|' -f2-4
done
sed -n '/^prefill stages/,$p' "$out/bench_all_on.txt"
