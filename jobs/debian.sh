# Sourced by the set-up scripts of jobs/: installs Debian packages, as root or through password-less sudo.
#
#   debian_install "what needs them" package...
#
# Exits 2 with the apt-get command to run when neither is possible. Expects the caller's say() for messages.

debian_install() {
  local why="$1"
  shift
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
      sudo=(sudo -n)
    else
      say "$why needs $*, and installing them needs root: apt-get install $*"
      exit 2
    fi
  fi
  say "installing $* (once per machine)"
  "${sudo[@]}" apt-get update -qq
  # sudo drops the caller's environment, so DEBIAN_FRONTEND goes inside the command it runs.
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
