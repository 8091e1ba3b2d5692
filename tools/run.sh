#!/usr/bin/env bash
# Sets up and runs the engine on its built-in small model: installs dependencies, builds, makes the
# small random-weight model on first use (in ~/.cache/qwick) and generates from a prompt.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"
./build/qwick run --prompt-ids "1 2 3 4 5 6 7 8" -n 32 "$@"
