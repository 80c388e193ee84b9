#!/usr/bin/env bash
# Set up Collapsar on a fresh Debian 12 machine and run it.
#
#   scripts/setup.sh demo   install what the main job needs, then run it
#   scripts/setup.sh test   install everything, run the static checks, build, and run every test tier
#
# Run as root (network namespaces, traffic control and eBPF need it).  Every
# dependency comes from deps/apt-*.txt (Debian) and pyproject.toml (PyPI, with
# what those pull in pinned by deps/python-constraints.txt), pinned; the Python
# side lives in .venv so the system Python stays untouched.
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
  # The demo: shaping, counters, Aeron, and the VM for kernels without sch_netem.
  local lists=(deps/apt-base.txt deps/apt-tcal.txt deps/apt-tcal-bpf.txt deps/apt-vm.txt deps/apt-aeron.txt)
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
  local extra=test
  if [ "$1" = demo ]; then extra=vm; fi
  # pyproject.toml pins what Collapsar uses; deps/python-constraints.txt pins
  # what those pull in, so a fresh machine gets the tested set.
  .venv/bin/python -m pip install -q --disable-pip-version-check \
    -c deps/python-constraints.txt -e ".[$extra]"
}

build_native() {
  step "Native parts (workload node, eBPF counters)"
  if [ -f workload-node/Makefile ]; then make -s -C workload-node all; fi
  if [ -f tcal/Makefile ]; then make -s -C tcal; fi
}

build_dashboard() {
  step "Dashboard page (npm ci + esbuild, pinned in dashboard/web/package-lock.json)"
  # Debian's nodejs comes without npm; NodeSource's carries its own (and
  # conflicts with Debian's npm package), so add npm only where it is missing.
  if ! command -v npm >/dev/null; then
    apt-get install -y -qq --no-install-recommends npm >/dev/null
  fi
  (cd dashboard/web && npm ci --no-audit --no-fund --loglevel=error && npm run build --silent)
}

build_aeron() {
  step "Aeron media driver and C client (pinned source release)"
  bash scripts/build-aeron.sh
}

export PATH="$top/.venv/bin:$PATH"

install_apt "$mode"
install_python "$mode"

if [ "$mode" = demo ]; then
  make -s -C tcal  # the eBPF counters that measure each pair's throughput
  build_aeron      # bandwidth sharing between the instances' flows
  step "Main job: topologies/demo.yaml"
  collapsar validate topologies/demo.yaml
  collapsar collapse topologies/demo.yaml
  # The demo has delay, jitter and loss: it needs sch_netem.  Where this
  # kernel lacks it, the same run goes into a VM with Debian's stock kernel.
  vm=()
  if ! collapsar check topologies/demo.yaml; then
    echo "setup.sh: no sch_netem here, so the demo runs in a VM (about a minute to boot)"
    vm=(--vm)
  fi
  collapsar run topologies/demo.yaml --duration 30s --probe 50 "${vm[@]}"
  exit 0
fi

step "Static checks: ruff, ruff format, mypy, import-linter (scripts/check.py)"
# Before anything slow: a failing check stops the run here.
if ! python scripts/check.py; then
  echo "setup.sh: a static check failed (above); fix it, then rerun: .venv/bin/python scripts/check.py" >&2
  exit 1
fi
build_native
build_aeron
build_dashboard
# The docker tier starts dockerd if it is not running (and stops it after) and
# builds the images itself (make -C docker images: ~2 min the first time, cached after).
step "Tests: unit, workload, kernel, vm, docker, browser"
mkdir -p artifacts
# pytest exits 5 when it collects nothing; that is a failure here, never a pass.
python -m pytest tests -p no:cacheprovider --junitxml=artifacts/junit.xml "${@:2}"
