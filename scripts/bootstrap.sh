#!/usr/bin/env bash
# Installs, only when missing, every Debian package that building, testing
# and running dnnlab need. Idempotent; run as root (or with sudo available).
# Usage: scripts/bootstrap.sh [--bench]   (--bench adds the benchmark peers)
set -euo pipefail

packages=(
  build-essential cmake ninja-build lld git pkg-config ca-certificates
  zlib1g-dev libssl-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev libsqlite3-dev
  rabbitmq-server librabbitmq-dev
  iproute2 sqlite3
  libpq-dev postgresql
  libboost-dev libboost-system-dev
  dataset-fashion-mnist
  python3-sklearn
  emscripten nodejs npm chromium
  clang-format clang-14 libclang-rt-14-dev libfuzzer-14-dev
  openssl
  dpkg-dev file lintian curl
  podman runc mmdebstrap podman-compose golang-github-containernetworking-plugin-dnsname
)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(libopenblas-dev python3-torch python3-numpy hyperfine valgrind)
fi

missing=()
for p in "${packages[@]}"; do
  # Node.js may come from elsewhere (nodesource bundles npm in its nodejs,
  # which conflicts with Debian's npm): a working command is enough.
  case "$p" in
    nodejs) command -v node >/dev/null && continue ;;
    npm) command -v npm >/dev/null && continue ;;
  esac
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]}" >&2
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
