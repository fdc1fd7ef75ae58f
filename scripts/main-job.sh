#!/usr/bin/env bash
# The main job: build cicy-agent, start the local model gateway (unless CICY_GATEWAY_URL is
# set), create an `assistant` agent and hold a real two-turn conversation with it.
#
# Environment (all optional):
#   CICY_HOME          runtime home (default ~/.cicy)
#   CICY_GATEWAY_URL   use this gateway instead of starting the local one
#   CICY_API_STYLE     anthropic (default) or openai
#   CICY_MODEL         model name (default for the local gateway: smollm2)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

echo "== building cicy-agent (release)" >&2
cargo build --release --quiet
BIN="$ROOT/target/release/cicy-agent"

started_gateway=""
if [ -z "${CICY_GATEWAY_URL:-}" ]; then
    if ! scripts/local-gateway.sh url >/dev/null 2>&1; then
        started_gateway=yes
    fi
    echo "== starting the local model gateway (llama.cpp + SmolLM2-135M-Instruct)" >&2
    CICY_GATEWAY_URL="$(scripts/local-gateway.sh start | tail -n 1)"
    export CICY_GATEWAY_URL
    export CICY_MODEL="${CICY_MODEL:-smollm2}"
fi
cleanup() {
    if [ -n "$started_gateway" ]; then
        scripts/local-gateway.sh stop || true
    fi
}
trap cleanup EXIT

echo "== gateway: $CICY_GATEWAY_URL (${CICY_API_STYLE:-anthropic})" >&2
ID="$("$BIN" create "Demo assistant" --role-template assistant)"
echo "== created agent $ID" >&2
"$BIN" show "$ID" >&2

ask() {
    echo >&2
    echo "you> $1" >&2
    printf '%s> ' "$ID" >&2
    "$BIN" chat "$ID" "$1"
}
ask "Hello! In one sentence, what is the capital of France?"
ask "And what is the capital of Italy? Answer in one sentence."

echo >&2
echo "== history of $ID" >&2
"$BIN" history "$ID"
