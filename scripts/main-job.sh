#!/usr/bin/env bash
# The main job: build cicy-agent, start the local model gateway (unless CICY_GATEWAY_URL is
# set), create an `assistant` agent and hold a real two-turn conversation with it.
#
# Environment (all optional):
#   CICY_HOME          runtime home (default ~/.cicy)
#   CICY_GATEWAY_URL   use this gateway instead of starting the local one
#   CICY_API_STYLE     anthropic (default) or openai
#   CICY_MODEL         model name (default for the local gateway: smollm2)
#   GATEWAY_CTX        context size of the local model in tokens (default 8192, see
#                      scripts/local-gateway.sh); passed on as CICY_CONTEXT_WINDOW so cicy
#                      compacts for the window the model really has
#   CICY_CONTEXT_WINDOW  the model's context window in tokens (overrides the above)
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
    # The local server gives its one slot the whole n_ctx (local-gateway.sh GATEWAY_CTX).
    export CICY_CONTEXT_WINDOW="${CICY_CONTEXT_WINDOW:-${GATEWAY_CTX:-8192}}"
fi
cleanup() {
    if [ -n "$started_gateway" ]; then
        scripts/local-gateway.sh stop || true
    fi
}
trap cleanup EXIT

echo "== gateway: $CICY_GATEWAY_URL (${CICY_API_STYLE:-anthropic}), context window ${CICY_CONTEXT_WINDOW:-from config.yaml}" >&2
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
