# Sourced by the GPU measurement scripts (gpu_prefill.sh, gpu_decode.sh), with BIN_DIR as $1: the
# binaries' lib/ on LD_LIBRARY_PATH, logs under $OUT (default gpu-out), the GPU named, and the steps both
# take. Sets bin, out, model.
bin=$(cd "$1" && pwd)
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
export LD_LIBRARY_PATH=$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export QWICK_HOME=/tmp/qwick-home
model=/tmp/full
stamp() { date +%s; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader

# gpu_test NAME [gtest args...]: runs $bin/NAME if it is there, one summary line and its failures.
gpu_test() {
  local name=$1 t
  shift
  [[ -x "$bin/$name" ]] || return 0
  t=$(stamp)
  "$bin/$name" "$@" >"$out/$name.log" 2>&1
  echo "$name rc=$? ($(($(stamp) - t)) s): $(grep -E '^\[  (PASSED|FAILED)' "$out/$name.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure|error:|Expected|Which is|fixture" "$out/$name.log" | head -20
}

# The full-size random-weight model at $model.
make_full_model() {
  local t
  t=$(stamp)
  "$bin/qwick" make-model --preset qwen3.6-35b-a3b "$model" >"$out/make_model.log" 2>&1
  echo "make-model rc=$? ($(($(stamp) - t)) s)"
}
