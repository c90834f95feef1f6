#!/usr/bin/env bash
# A headless browser for the UI test (tests/test_ui_browser.py), which opens MLflow's run page in Debian's
# chromium and checks what it renders.
#
#   bash jobs/browser.sh install   # Debian's chromium, when missing (root, or sudo when it is available)
#   bash jobs/browser.sh path      # prints the chromium executable the test will use
set -euo pipefail

say() { echo "[browser] $*" >&2; }

install() {
  if command -v chromium >/dev/null; then
    return 0
  fi
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
      sudo=(sudo -n)
    else
      say "chromium is missing and installing it needs root: apt-get install chromium"
      exit 2
    fi
  fi
  say "installing chromium (once per machine)"
  "${sudo[@]}" apt-get update -qq
  # sudo drops the caller's environment, so DEBIAN_FRONTEND goes inside the command it runs.
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
}

case "${1:-}" in
  install) install ;;
  path) command -v chromium || { say "chromium is missing: run bash jobs/browser.sh install"; exit 1; } ;;
  *) echo "usage: $0 install|path" >&2; exit 2 ;;
esac
