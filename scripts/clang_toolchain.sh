# Sourced by scripts/sanitize.sh and scripts/fuzz.sh: installs clang, its
# sanitizer runtimes and its OpenMP when missing (clang-14 on Debian 12,
# clang-19 on Debian 13) and sets CLANG_MAJOR. Expects step() to be defined.
apt_install() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  step "installing Debian packages: ${missing[*]}"
  local SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
    $SUDO apt-get update -qq && $SUDO apt-get install -y --no-install-recommends "${missing[@]}"; }
}
command -v clang++ >/dev/null || apt_install clang
CLANG_MAJOR=$(clang++ -dumpversion | cut -d. -f1)
apt_install "libclang-rt-$CLANG_MAJOR-dev" "libomp-$CLANG_MAJOR-dev"
