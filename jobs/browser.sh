#!/usr/bin/env bash
# A headless browser for the UI test (tests/test_ui_browser.py), which opens MLflow's run page in Debian's
# chromium and checks what it renders.
#
#   bash jobs/browser.sh install   # Debian's chromium, when missing (root, or sudo when it is available)
#   bash jobs/browser.sh path      # prints the chromium executable the test will use
set -euo pipefail

say() { echo "[browser] $*" >&2; }

# shellcheck source=jobs/debian.sh
source "$(dirname "$0")/debian.sh"

install() {
  if command -v chromium >/dev/null; then
    return 0
  fi
  debian_install "the UI test" chromium
}

case "${1:-}" in
  install) install ;;
  path) command -v chromium || { say "chromium is missing: run bash jobs/browser.sh install"; exit 1; } ;;
  *) echo "usage: $0 install|path" >&2; exit 2 ;;
esac
