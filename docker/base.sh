#!/usr/bin/env bash
# Build the Debian base image from packages only: debootstrap a minbase
# bookworm from this machine's configured Debian mirror, `docker import` it.
#
#   docker/base.sh IMAGE CACHE_DIR
#
# No container registry is involved (none is reachable here, and air-gapped
# labs are common).  The root filesystem tarball is cached under CACHE_DIR,
# named by a content key (suite + mirror + package list + recipe version), so a
# second run costs one `docker import` at most, and nothing at all when the
# image with that key is already loaded.
set -euo pipefail

image=${1:?usage: docker/base.sh IMAGE CACHE_DIR}
cache=${2:?usage: docker/base.sh IMAGE CACHE_DIR}
here=$(cd "$(dirname "$0")" && pwd)
suite=bookworm

die() { echo "docker/base.sh: $*" >&2; exit 1; }

command -v debootstrap >/dev/null || die "debootstrap is missing; fix: apt-get install debootstrap (deps/apt-docker.txt)"
command -v docker >/dev/null || die "docker is missing; fix: apt-get install docker.io (deps/apt-docker.txt)"
docker info >/dev/null 2>&1 || die "cannot reach the Docker daemon; fix: start dockerd (the docker test tier starts it itself)"

# The mirror the host itself installs from: deb822 (.sources) or one-line form.
mirror=$(
  { grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}';
    grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}'; } |
  grep -m1 '/debian/\?$' || true)
mirror=${mirror:-http://deb.debian.org/debian}

# What every Collapsar image needs at run time (the build tools stay on the host).
packages=$(sed 's/#.*//' "$here/base-packages.txt" | tr -s ' \n' '\n' | sed '/^$/d' | sort -u | paste -sd, -)

# Bump when the way the root filesystem is made changes (not for comments).
recipe=1
key=$(echo "$suite $mirror $packages $recipe" | sha256sum | cut -c1-16)
tarball="$cache/debian-$suite-$key.tar"

if [ "$(docker image inspect -f '{{index .Config.Labels "org.collapsar.base-key"}}' "$image" 2>/dev/null)" = "$key" ]; then
  echo "base image $image is current (key $key)"
  exit 0
fi

mkdir -p "$cache"
if [ ! -s "$tarball" ]; then
  root=$(mktemp -d "$cache/rootfs.XXXXXX")
  trap 'rm -rf "$root"' EXIT
  echo "debootstrap $suite (minbase) from $mirror into $root"
  debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
    die "debootstrap failed (log: $cache/debootstrap.log); fix: check that $mirror is reachable"
  # Nothing the image does not need at run time: apt lists, caches, docs.
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
         "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/*
  # Image layers hold the files, not the host's idea of the time they were made.
  tar --numeric-owner --sort=name -C "$root" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
  # Only the current base is kept: an older key's tarball is never used again.
  find "$cache" -maxdepth 1 -name "debian-$suite-*.tar" ! -name "$(basename "$tarball")" -delete
  rm -rf "$root"
  trap - EXIT
fi

docker import --change "LABEL org.collapsar.base-key=$key" --change 'CMD ["/bin/bash"]' \
  "$tarball" "$image" >/dev/null
echo "base image $image imported from $tarball"
