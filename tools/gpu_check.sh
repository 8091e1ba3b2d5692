#!/usr/bin/env bash
# The CUDA backend's check on the GPU machine, in one run: build (the server included), the GPU
# tests and the server's C++ tests, then by mode:
#   tests   nothing more;
#   quick   a short run and bench on the built-in small model, and `qwick serve --device cuda` on it
#           answering three chat requests through HTTP (tools/serve_check.sh: plain, streamed, tools);
#   serve   the full-size model made with make-model, and the same three requests to it;
#   full    the full-size model: CUDA against CPU logits over 300 positions (prefill, and prefill +
#           decode through the graph), the three requests, and the bench at all ten lengths.
# Prints a summary last (a PASS or FAIL line for each request); logs, JSON and the plot go to $OUT
# (default gpu-out).
#   tools/gpu_check.sh tests|quick|serve|full
# QWICK_SKIP_EVALS=1 (full): skip the CUDA-vs-CPU comparison. QWICK_SKIP_GPU_TESTS=1: skip the GPU
# tests (to check the server alone). QWICK_SKIP_SERVER_TESTS=1: skip the server's C++ tests (CI runs
# them; the server is still built for the chat requests).
# QWICK_DEPS_SRC: a tools/bundle_deps.sh bundle, used when the machine has no fmt/json/gtest/httplib
# (the GPU machine): `tools/bundle_deps.sh .dev/deps` here, carry .dev/deps, and run
# `QWICK_DEPS_SRC=.dev/deps tools/gpu_check.sh full` there.
set -uo pipefail
mode=${1:-quick}
case "$mode" in
  tests | quick | serve | full) ;;
  *) echo "usage: tools/gpu_check.sh tests|quick|serve|full" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
jobs=$(nproc)
[[ -d /usr/local/cuda/bin ]] && export PATH=$PATH:/usr/local/cuda/bin
summary=()
note() { summary+=("$1"); }
stamp() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(stamp)" 'BEGIN { printf "%.1f", b - a }'; }

nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv,noheader

# ---- dependencies --------------------------------------------------------------------------------
prefix_args=()
if [[ -n "${QWICK_DEPS_SRC:-}" && -d "${QWICK_DEPS_SRC}" ]]; then
  t=$(stamp)
  deps=/tmp/qwick-deps
  read -r fmt_v json_v httplib_v <"$QWICK_DEPS_SRC/versions"
  mkdir -p "$deps/lib/cmake/fmt" "$deps/lib/cmake/nlohmann_json" "$deps/lib/pkgconfig"
  cp -r "$QWICK_DEPS_SRC/include" "$deps/"
  cp -r "$QWICK_DEPS_SRC/lib/." "$deps/lib/"
  for pkg in fmt:fmt:"$fmt_v":FMT_HEADER_ONLY=1 nlohmann_json:nlohmann_json:"$json_v":; do
    IFS=: read -r name target version defs <<<"$pkg"
    cat >"$deps/lib/cmake/$name/$name-config.cmake" <<CFG
if(NOT TARGET $name::$target)
  add_library($name::$target INTERFACE IMPORTED)
  set_target_properties($name::$target PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "$deps/include"
                        INTERFACE_COMPILE_DEFINITIONS "$defs")
endif()
CFG
    cat >"$deps/lib/cmake/$name/$name-config-version.cmake" <<CFG
set(PACKAGE_VERSION "$version")
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
endif()
CFG
  done
  cmake -S "$QWICK_DEPS_SRC/googletest" -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
    -DCMAKE_INSTALL_PREFIX="$deps" >/dev/null && cmake --build /tmp/gtest-build -j "$jobs" >/dev/null &&
    cmake --install /tmp/gtest-build >/dev/null || { echo "googletest build failed"; exit 1; }
  prefix_args=(-DCMAKE_PREFIX_PATH="$deps")
  if [[ -f "$deps/include/httplib.h" ]]; then
    # src/CMakeLists.txt finds cpp-httplib with pkg-config: a .pc for the bundle's copy, whose classes
    # are laid out for OpenSSL support. The library's own dependencies (OpenSSL, zlib, brotli) are the
    # machine's.
    cat >"$deps/lib/pkgconfig/cpp-httplib.pc" <<PC
Name: cpp-httplib
Description: cpp-httplib from the qwick dependency bundle
Version: $httplib_v
Libs: -L$deps/lib -lcpp-httplib
Cflags: -I$deps/include -DCPPHTTPLIB_OPENSSL_SUPPORT
PC
    export PKG_CONFIG_PATH=$deps/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  fi
  note "deps from bundle: $(elapsed "$t") s"
fi

# ---- build ---------------------------------------------------------------------------------------
t=$(stamp)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DQWICK_CUDA=ON -DQWICK_WERROR=OFF "${prefix_args[@]}" \
  >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
rm "$out/configure.log"
if ! cmake --build build -j "$jobs" >"$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -40
  exit 1
fi
note "build: $(elapsed "$t") s ($(grep -c warning "$out/build.log") warning lines)"
server_built=0
if [[ -x build/tests/server/server_stream_test ]]; then server_built=1; fi

# ---- GPU tests -----------------------------------------------------------------------------------
if [[ "${QWICK_SKIP_GPU_TESTS:-0}" != 1 ]]; then
  t=$(stamp)
  ctest --test-dir build -L gpu -V --timeout 600 >"$out/gpu_tests.log" 2>&1
  grep -E "tests passed|tests failed|\(Failed\)|\(Skipped\)|\*\*\*Failed|Passed +[0-9.]+ sec" "$out/gpu_tests.log" | sed 's/^[0-9]*: //' | tail -40
  note "GPU tests: $(grep -E 'tests passed' "$out/gpu_tests.log" | head -1) ($(elapsed "$t") s)"
  while read -r line; do note "$line"; done < <(grep -E "^[0-9]+: \[ fixture" "$out/gpu_tests.log" | sed 's/^[0-9]*: //')
fi

# ---- the server's tests ---------------------------------------------------------------------------
# The ctest entries of tests/server but those that drive the server with Node's openai client (this
# machine has no Node.js, and they are defined only where node is found).
if [[ "${QWICK_SKIP_SERVER_TESTS:-0}" == 1 ]]; then
  :
elif ((server_built)); then
  t=$(stamp)
  verdict="server tests"
  ctest --test-dir build/tests/server -E '^node\.' --timeout 300 >"$out/server_tests.log" 2>&1 ||
    verdict="FAIL server tests"
  grep -E "tests passed|tests failed|\(Failed\)|\*\*\*Failed" "$out/server_tests.log" | tail -20
  note "$verdict: $(grep -E 'tests passed' "$out/server_tests.log" | head -1) ($(elapsed "$t") s)"
else
  note "FAIL server: not built (cpp-httplib not found; see the build's configure step)"
fi

q=./build/qwick
export QWICK_HOME=/tmp/qwick-home
# serve_check [serve options...]: the three chat requests through HTTP, a PASS or FAIL line each.
serve_check() {
  local t
  t=$(stamp)
  if ((!server_built)); then
    note "FAIL chat requests: no qwick serve in this build"
    return
  fi
  while read -r line; do note "$line"; done < <(OUT=$out tools/serve_check.sh "$q" --device cuda "$@")
  note "qwick serve --device cuda, three requests: $(elapsed "$t") s (log: serve.log)"
}

if [[ "$mode" == tests ]]; then
  :
elif [[ "$mode" == quick ]]; then
  t=$(stamp)
  $q run --device cuda --prompt-ids "1 2 3 4 5 6 7 8" -n 16 2>&1 | tail -4
  $q bench --device cuda --lengths 256,1K,4K,16K --prefill-reps 2 --decode-reps 3 --decode-tokens 32 --pp 512 --tg 128 \
    --table-reps 3 --json "$out/bench_small.json" 2>&1 | tee "$out/bench_small.txt"
  note "small-model run + bench: $(elapsed "$t") s"
  serve_check
else
  # ---- the full-size model (serve, full) --------------------------------------------------------
  model=/tmp/full
  t=$(stamp)
  $q make-model --preset qwen3.6-35b-a3b "$model" 2>&1 | tail -1
  note "make-model (19.5 GB): $(elapsed "$t") s"
fi
if [[ "$mode" == serve ]]; then
  serve_check -m "$model"
elif [[ "$mode" == full ]]; then
  python3 "$(dirname "$0")/eval_tokens.py" /tmp/tokens.safetensors
  if [[ "${QWICK_SKIP_EVALS:-0}" != 1 ]]; then
    t=$(stamp)
    result=$(timeout 300 $q eval -m $model --device cpu --tokens /tmp/tokens.safetensors --out /tmp/cpu_logits.safetensors 2>&1 | tail -1)
    echo "cpu: $result" | tee -a "$out/evals.txt"
    note "CPU eval, 300 positions: $(elapsed "$t") s: $result"
    for variant in "prefill:" "prefill200+decode100:--decode-from 200" "chunk64:--chunk 64"; do
      name=${variant%%:*} args=${variant#*:}
      t=$(stamp)
      # shellcheck disable=SC2086
      result=$(timeout 120 $q eval -m $model --device cuda --tokens /tmp/tokens.safetensors --reference /tmp/cpu_logits.safetensors $args 2>&1 | tail -1)
      echo "cuda $name: $result" | tee -a "$out/evals.txt"
      note "CUDA vs CPU, full model, $name: $result ($(elapsed "$t") s)"
    done
  fi
  serve_check -m "$model"
  t=$(stamp)
  timeout 330 $q bench -m $model --device cuda --prefill-reps 3 --decode-reps 3 --decode-tokens 32 --rep-budget 10 --table-reps 3 \
    --json "$out/bench_full.json" --plot "$out/bench_full.png" 2>&1 | tee "$out/bench_full.txt"
  note "full bench: $(elapsed "$t") s"
fi

echo
echo "==== summary ===="
printf '%s\n' "${summary[@]}"
if [[ -f "$out/bench_full.txt" ]]; then grep -E "^\|" "$out/bench_full.txt" | head -14; fi
grep -h "device memory" "$out"/bench_*.txt 2>/dev/null
# Fails when a check printed a FAIL line (the server's build or tests, the chat requests).
! printf '%s\n' "${summary[@]}" | grep -q '^FAIL'
