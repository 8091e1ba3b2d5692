#!/usr/bin/env bash
# Sets up and runs every test: installs dependencies, checks the style (tools/check_style.sh:
# formatting, the per-file line budget, "Tested in" comments), then builds and runs the suite in
# three configurations: Release, ASan+UBSan, and the libFuzzer targets (a short run each). A style
# failure is reported first and fails the run at its end, after the tests.
#   tools/test.sh            everything
#   QWICK_TEST_QUICK=1 ...   style and Release only
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
(cd tests/node && npm ci --no-audit --no-fund)  # the reference libraries the text tests compare against
(cd tests/node/cli && npm ci --no-audit --no-fund)  # Codex CLI and Claude Code, for node.agent_clis
jobs=$(nproc)

style=0
tools/check_style.sh || style=1
# The tests passed; the run passes if the style did too.
finish() {
  if ((style)); then
    echo "== the tests passed, the style checks failed (see the top of the log) =="
    exit 1
  fi
  exit 0
}

echo "== Release =="
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$jobs"
ctest --test-dir build -j "$jobs" --output-on-failure

if [[ "${QWICK_TEST_QUICK:-0}" == "1" ]]; then finish; fi

echo "== ASan + UBSan =="
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQWICK_SANITIZE=ON
cmake --build build-asan -j "$jobs"
ctest --test-dir build-asan -j "$jobs" --output-on-failure

echo "== libFuzzer =="
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQWICK_FUZZ=ON -DQWICK_TESTS=OFF
cmake --build build-fuzz -j "$jobs" --target fuzz_safetensors fuzz_config fuzz_gbnf fuzz_json_schema \
  fuzz_messages_request fuzz_responses_request
ctest --test-dir build-fuzz --output-on-failure
finish
