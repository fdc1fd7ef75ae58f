#!/usr/bin/env bash
# Installs the MCP server the tests talk to: @modelcontextprotocol/server-everything, the MCP
# project's reference server (nobody on this project wrote it), pinned, from npm into
# .cache/mcp/ (gitignored). Prints the path of its entry script; run it as
# `node <path> stdio`. Does no npm work when that version is already installed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PKG="@modelcontextprotocol/server-everything"
VERSION="${MCP_EVERYTHING_VERSION:-2026.8.31}"
DIR="$ROOT/.cache/mcp"
ENTRY="$DIR/node_modules/$PKG/dist/index.js"
MANIFEST="$DIR/node_modules/$PKG/package.json"

installed_version() {
    [ -f "$MANIFEST" ] && node -e 'process.stdout.write(require(process.argv[1]).version)' "$MANIFEST" 2>/dev/null
}

if [ "$(installed_version || true)" != "$VERSION" ] || [ ! -f "$ENTRY" ]; then
    command -v npm >/dev/null || { echo "mcp-test-server: npm is needed to install $PKG" >&2; exit 1; }
    mkdir -p "$DIR"
    npm install --prefix "$DIR" --no-audit --no-fund --no-save --loglevel=error "$PKG@$VERSION" >&2
fi
echo "$ENTRY"
