#!/usr/bin/env bash
# Set up Collapsar on a fresh Debian 12 machine and run it.
#
#   scripts/setup.sh demo   install what the main job needs, then run it
#   scripts/setup.sh test   install everything, build, and run every test tier
#
# Run as root (network namespaces, traffic control and eBPF need it).  Every
# dependency comes from deps/apt-*.txt (Debian) and pyproject.toml (PyPI),
# pinned; the Python side lives in .venv so the system Python stays untouched.
set -euo pipefail

mode=${1:-}
case "$mode" in
  demo|test) ;;
  *) echo "usage: scripts/setup.sh demo|test" >&2; exit 2 ;;
esac

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

if [ "$(id -u)" -ne 0 ]; then
  echo "setup.sh: needs root (apt, network namespaces, tc, eBPF); fix: run it with sudo" >&2
  exit 3
fi

step() { printf '\n== %s\n' "$*"; }

install_apt() {
  step "Debian packages ($1)"
  local lists=(deps/apt-base.txt)
  if [ "$1" = test ]; then lists=(deps/apt-*.txt); fi
  local packages
  packages=$(cat "${lists[@]}" | sed 's/#.*//' | tr -s ' \n' '\n' | sed '/^$/d' | sort -u | tr '\n' ' ')
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $packages >/dev/null
}

install_python() {
  step "Python environment (.venv)"
  if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
  fi
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]"
}

build_native() {
  step "Native parts (workload node, eBPF counters)"
  if [ -f workload-node/Makefile ]; then make -s -C workload-node all; fi
  if [ -f tcal/Makefile ]; then make -s -C tcal; fi
}

build_aeron() {
  step "Aeron media driver and C client (pinned source release)"
  bash scripts/build-aeron.sh
}

export PATH="$top/.venv/bin:$PATH"

install_apt "$mode"
install_python

if [ "$mode" = demo ]; then
  # Validating and collapsing need only Python; the native parts (and their
  # clang/libbpf toolchain) come with `test` and with `collapsar run`.
  step "Main job: topologies/demo.yaml"
  collapsar validate topologies/demo.yaml
  collapsar collapse topologies/demo.yaml
  exit 0
fi

build_native
build_aeron
step "Tests: unit, workload, kernel, vm (docker and browser tiers arrive with their issues)"
mkdir -p artifacts
# pytest exits 5 when it collects nothing; that is a failure here, never a pass.
python -m pytest tests -p no:cacheprovider --junitxml=artifacts/junit.xml "${@:2}"
