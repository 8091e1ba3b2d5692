#!/usr/bin/env bash
# Sets up and runs the engine on its built-in small model: installs dependencies, builds, starts
# `qwick serve` (making the small random-weight model in ~/.cache/qwick on first use), sends one
# OpenAI chat request with curl, prints the answer and stops the server.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"
exec tools/serve_example.sh "$@"
