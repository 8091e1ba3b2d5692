#!/usr/bin/env bash
# Starts `qwick serve` (the built-in small model unless -m DIR is passed), waits until it is
# ready, sends one chat request with curl, prints the answer and stops the server.
#   tools/serve_example.sh [qwick serve options...]      (after a build in ./build)
set -euo pipefail
cd "$(dirname "$0")/.."
qwick=./build/qwick
log=$(mktemp)
"$qwick" serve --port 0 "$@" 2>"$log" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
url=""
for _ in $(seq 1200); do  # the built-in model is made on first use
  url=$(grep -o 'http://[0-9.]*:[0-9]*' "$log" | head -1 || true)
  if [[ -n "$url" ]] && curl -sf "$url/health" >/dev/null; then break; fi
  kill -0 "$pid" 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
cat "$log"
echo "POST $url/v1/chat/completions"
curl -s "$url/v1/chat/completions" -H 'Content-Type: application/json' -d '{
  "messages": [{"role": "user", "content": "Hello! Who are you?"}],
  "max_tokens": 32, "temperature": 0}'
echo
