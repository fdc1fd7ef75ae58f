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

cargo test --all-targets -j 2 "$@"
