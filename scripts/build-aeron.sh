#!/usr/bin/env bash
# Build Aeron's C client library and C media driver from a pinned source release.
#
#   scripts/build-aeron.sh           build once; a no-op (well under a second) when built
#   scripts/build-aeron.sh --force   rebuild from scratch
#
# Why this route: Aeron publishes no C binaries, and the project may reach the
# network only through package registries.  The crates registry's
# `rusteron-client` 0.2.10 ships the Aeron 1.52.2 source tree unmodified under
# `aeron/`, so its .crate (a tar.gz, checked against a pinned sha256) gives us
# a pinned upstream release with nothing but curl: no Rust toolchain needed.  Aeron needs CMake >= 3.30 (Debian 12 has 3.25), which
# we take from PyPI into a private venv.
#
# Output (all under third_party/aeron/, which .gitignore excludes):
#   install/lib/libaeron.so, install/lib/libaeron_driver.so
#   install/include/aeronc.h
#   install/bin/aeronmd          (finds its libraries through an $ORIGIN rpath)
set -euo pipefail

AERON_VERSION=1.52.2
CRATE=rusteron-client
CRATE_VERSION=0.2.10
# sha256 of the .crate as the crates.io index records it.
CRATE_SHA256=b2512747e7a381d368362513952f5d266da1e15d19e9312cfacdafaeb08b6906
CMAKE_PIN=3.31.10
JOBS=${AERON_BUILD_JOBS:-2}

top=$(cd "$(dirname "$0")/.." && pwd)
base="$top/third_party/aeron"
src="$base/src-$AERON_VERSION"
build="$base/build"
tools="$base/tools"
prefix="$base/install"
stamp="$prefix/.built"
# Everything that changes the output goes into the stamp, so a changed pin rebuilds.
want="aeron=$AERON_VERSION crate=$CRATE@$CRATE_VERSION cmake=$CMAKE_PIN flags=pic,release,driver,no-archive,no-tests,no-samples,no-docs"

die() { echo "build-aeron.sh: $*" >&2; exit 1; }
step() { printf '== %s\n' "$*"; }

if [ "${1:-}" = "--force" ]; then
  rm -rf "$build" "$prefix"
elif [ -n "${1:-}" ]; then
  echo "usage: scripts/build-aeron.sh [--force]" >&2; exit 2
fi

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
   && [ -x "$prefix/bin/aeronmd" ] && [ -f "$prefix/lib/libaeron.so" ] && [ -f "$prefix/include/aeronc.h" ]; then
  echo "aeron $AERON_VERSION already built in $prefix"
  exit 0
fi

fetch_source() {
  [ -f "$src/version.txt" ] && return 0
  command -v curl >/dev/null || die "curl not found; fix: apt-get install curl (deps/apt-aeron.txt)"
  step "fetch $CRATE $CRATE_VERSION (Aeron $AERON_VERSION source) from crates.io"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  local crate="$tmp/$CRATE-$CRATE_VERSION.crate"
  # A .crate is a gzipped tar; crates.io serves it by name and version from
  # its static host.  The pinned sha256 below is what its index records.
  curl --fail --silent --show-error --location --retry 3 -o "$crate" \
    "https://static.crates.io/crates/$CRATE/$CRATE-$CRATE_VERSION.crate" \
    || die "could not download $CRATE $CRATE_VERSION from static.crates.io"
  echo "$CRATE_SHA256  $crate" | sha256sum --check --quiet \
    || die "$crate: sha256 differs from the pinned $CRATE_SHA256"
  tar -xzf "$crate" -C "$tmp" "$CRATE-$CRATE_VERSION/aeron"
  local got
  got=$(head -n 1 "$tmp/$CRATE-$CRATE_VERSION/aeron/version.txt")
  [ "$got" = "$AERON_VERSION" ] || die "$CRATE $CRATE_VERSION carries Aeron $got, expected $AERON_VERSION"
  mkdir -p "$base"
  rm -rf "$src"
  mv "$tmp/$CRATE-$CRATE_VERSION/aeron" "$src"
}

install_cmake() {
  if [ -x "$tools/bin/cmake" ] && "$tools/bin/cmake" --version | grep -q "version $CMAKE_PIN\$"; then
    return 0
  fi
  step "cmake==$CMAKE_PIN from PyPI into $tools"
  python3 -m venv "$tools" || die "python3 -m venv failed; fix: apt-get install python3-venv"
  "$tools/bin/python" -m pip install --quiet --disable-pip-version-check "cmake==$CMAKE_PIN"
}

configure_and_build() {
  step "configure (C client + C media driver only)"
  # Archive needs a network download of its codecs (hence OFF offline); tests,
  # samples and docs are not needed and would triple the build time.
  "$tools/bin/cmake" -S "$src" -B "$build" -G "Unix Makefiles" \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
    -DBUILD_AERON_DRIVER=ON \
    -DBUILD_AERON_ARCHIVE_API=OFF \
    -DAERON_TESTS=OFF -DAERON_UNIT_TESTS=OFF -DAERON_SYSTEM_TESTS=OFF \
    -DAERON_BUILD_SAMPLES=OFF -DAERON_BUILD_DOCUMENTATION=OFF \
    -DAERON_INSTALL_TARGETS=OFF \
    -DCMAKE_BUILD_RPATH='$ORIGIN/../lib' \
    > "$base/configure.log" 2>&1 || { tail -n 30 "$base/configure.log" >&2; die "cmake configure failed (log: $base/configure.log)"; }
  step "build targets aeron, aeronmd with -j$JOBS"
  # Only the shared client and the driver executable: aeronmd pulls in
  # libaeron_driver.so and libaeron.so, so the client sources compile once.
  "$tools/bin/cmake" --build "$build" --target aeron aeronmd -j "$JOBS" \
    > "$base/build.log" 2>&1 || { tail -n 30 "$base/build.log" >&2; die "build failed (log: $base/build.log)"; }
}

install_outputs() {
  local lib_aeron lib_driver md
  lib_aeron=$(find "$build" -name 'libaeron.so' -print -quit)
  lib_driver=$(find "$build" -name 'libaeron_driver.so' -print -quit)
  md=$(find "$build" -name aeronmd -type f -perm -u+x -print -quit)
  [ -n "$lib_aeron" ] && [ -n "$lib_driver" ] && [ -n "$md" ] || die "build finished but its outputs are missing in $build"
  rm -rf "$prefix"
  mkdir -p "$prefix/bin" "$prefix/lib" "$prefix/include"
  cp -L "$lib_aeron" "$lib_driver" "$prefix/lib/"
  cp "$md" "$prefix/bin/aeronmd"
  cp "$src/aeron-client/src/main/c/aeronc.h" "$prefix/include/aeronc.h"
  # aeronmd's rpath is $ORIGIN/../lib, which now is $prefix/lib.
  if ldd "$prefix/bin/aeronmd" | grep -q 'not found'; then
    die "$prefix/bin/aeronmd cannot find its libraries"
  fi
  echo "$want" > "$stamp"
}

start=$(date +%s)
fetch_source
install_cmake
configure_and_build
install_outputs
echo "aeron $AERON_VERSION built into $prefix in $(( $(date +%s) - start )) s"
