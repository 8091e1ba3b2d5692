#!/usr/bin/env bash
# Starts `qwick serve` and sends three chat requests through HTTP with curl: a plain one, a streamed
# one ("stream": true) and one with a `tools` array. Checks each response's shape with python3 and
# prints one line each, "PASS name: ..." or "FAIL name: ...". Exits with the number of failures.
#   tools/serve_check.sh QWICK [qwick serve options...]
#   tools/serve_check.sh ./build/qwick --device cuda -m /tmp/full
# Without -m the server makes and serves its built-in small model. The server's log and the
# responses go to $OUT (default gpu-out); SERVE_CHECK_WAIT is how long loading may take (600 s).
set -uo pipefail
qwick=${1:?usage: tools/serve_check.sh QWICK [qwick serve options...]}
shift
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
log=$out/serve.log
max_tokens=16

"$qwick" serve --port 0 "$@" >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null' EXIT

# The server prints its address before it loads the model; /health answers 200 once it is loaded.
url=""
deadline=$((SECONDS + ${SERVE_CHECK_WAIT:-600}))
until [[ -n "$url" ]] && curl -sf --max-time 5 "$url/health" >/dev/null; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "FAIL serve: qwick serve exited before it was ready; its log:"
    tail -20 "$log"
    exit 3
  fi
  if ((SECONDS > deadline)); then
    echo "FAIL serve: not ready after ${SERVE_CHECK_WAIT:-600} s; its log:"
    tail -20 "$log"
    exit 3
  fi
  url=$(grep -o 'http://[0-9.]*:[0-9]*' "$log" | head -1)
  sleep 0.5
done

# post NAME BODY: the response body in $out/NAME.out, the HTTP status in $out/NAME.status.
post() {
  curl -s -o "$out/$1.out" -w '%{http_code}' --max-time 300 "$url/v1/chat/completions" \
    -H 'Content-Type: application/json' -d "$2" >"$out/$1.status"
}

question='"messages": [{"role": "user", "content": "What is the weather in Paris?"}], "temperature": 0'
post plain "{$question, \"max_tokens\": $max_tokens}"
post stream "{$question, \"max_tokens\": $max_tokens, \"stream\": true, \"stream_options\": {\"include_usage\": true}}"
post tools "{$question, \"max_tokens\": $max_tokens, \"tools\": [{\"type\": \"function\", \"function\": {
  \"name\": \"get_weather\", \"description\": \"The current weather in a city.\",
  \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}]}"

python3 - "$out" "$max_tokens" <<'PY'
import json, sys

out, max_tokens = sys.argv[1], int(sys.argv[2])
failures = 0


def read(name):
    status = open(f"{out}/{name}.status").read().strip()
    body = open(f"{out}/{name}.out", encoding="utf-8", errors="replace").read()
    if status != "200":
        raise AssertionError(f"HTTP {status}: {body[:300]}")
    return body


def check_tool_calls(calls):
    for c in calls:
        assert isinstance(c.get("id"), str) and c.get("type") == "function", f"tool call {c}"
        assert isinstance(c["function"].get("name"), str), f"tool call {c}"
        json.loads(c["function"]["arguments"])  # the arguments are a JSON text


def check_whole(name):
    r = json.loads(read(name))
    assert r.get("object") == "chat.completion", f"object {r.get('object')}"
    assert len(r["choices"]) == 1, f"{len(r['choices'])} choices"
    choice = r["choices"][0]
    message = choice["message"]
    assert message.get("role") == "assistant", f"role {message.get('role')}"
    assert message.get("content") is None or isinstance(message["content"], str), "content"
    assert choice["finish_reason"] in ("stop", "length", "tool_calls"), f"finish_reason {choice['finish_reason']}"
    check_tool_calls(message.get("tool_calls") or [])
    usage = r["usage"]
    assert usage["prompt_tokens"] > 0, "no prompt tokens"
    assert 1 <= usage["completion_tokens"] <= max_tokens, f"completion_tokens {usage['completion_tokens']}"
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"], "total_tokens"
    return r


def check_stream(name):
    lines = [l for l in read(name).split("\n") if l.startswith("data: ")]
    assert lines and lines[-1] == "data: [DONE]", "no [DONE] at the end"
    chunks = [json.loads(l[len("data: "):]) for l in lines[:-1]]
    assert all(c.get("object") == "chat.completion.chunk" for c in chunks), "chunk object"
    assert all("error" not in c for c in chunks), "an error event"
    with_choice = [c for c in chunks if c["choices"]]
    assert with_choice[0]["choices"][0]["delta"].get("role") == "assistant", "first delta's role"
    finishes = [c["choices"][0]["finish_reason"] for c in with_choice if c["choices"][0].get("finish_reason")]
    assert len(finishes) == 1 and finishes[0] in ("stop", "length", "tool_calls"), f"finish reasons {finishes}"
    text = "".join((c["choices"][0]["delta"].get("content") or "") +
                   (c["choices"][0]["delta"].get("reasoning_content") or "") for c in with_choice)
    usage = [c["usage"] for c in chunks if not c["choices"] and c.get("usage")]
    assert len(usage) == 1, f"{len(usage)} usage chunks"
    assert 1 <= usage[0]["completion_tokens"] <= max_tokens, f"completion_tokens {usage[0]['completion_tokens']}"
    return len(chunks), finishes[0], usage[0]["completion_tokens"], len(text)


def run(name, check):
    global failures
    try:
        print(f"PASS {name}: {check()}")
    except Exception as e:  # any missing field or wrong value is this request's failure
        failures += 1
        print(f"FAIL {name}: {type(e).__name__}: {e}")


plain = {}


def plain_check():
    plain.update(check_whole("plain"))
    u = plain["usage"]
    return f"finish {plain['choices'][0]['finish_reason']}, {u['prompt_tokens']} + {u['completion_tokens']} tokens"


def stream_check():
    n, finish, tokens, chars = check_stream("stream")
    return f"{n} chunks, finish {finish}, {tokens} tokens, {chars} characters of text"


def tools_check():
    r = check_whole("tools")
    # The tool's definition is rendered into the prompt, so it is longer than the plain one's.
    grown = r["usage"]["prompt_tokens"] - plain["usage"]["prompt_tokens"] if plain else None
    assert grown is None or grown > 20, f"the prompt grew by {grown} tokens with the tool"
    calls = r["choices"][0]["message"].get("tool_calls") or []
    return f"finish {r['choices'][0]['finish_reason']}, prompt +{grown} tokens for the tool, {len(calls)} tool calls"


run("chat", plain_check)
run("chat stream", stream_check)
run("chat tools", tools_check)
sys.exit(failures)
PY
