#!/usr/bin/env bash
# A Debian 12 (bookworm) slim base image as a tarball, made with mmdebstrap
# from Debian's own packages, for hosts that reach Debian's mirrors but no
# image registry. `podman import` (or `docker import`) turns it into the
# base that packaging/Containerfile takes as its BASE build argument:
#
#   packaging/debian_base.sh build/image          # -> build/image/debian-bookworm-slim.tar
#   podman import build/image/debian-bookworm-slim.tar localhost/debian:bookworm-slim
#   podman build --build-arg BASE=localhost/debian:bookworm-slim -f packaging/Containerfile ...
#
# Like the public debian:bookworm-slim: variant minbase, merged /usr (the essential and
# required packages and apt), no recommends, and dpkg keeps no man pages,
# info pages, docs (but each package's copyright) or translations, in this
# build and in whatever the image installs later (the filters stay in
# /etc/dpkg/dpkg.cfg.d/99mmdebstrap). apt's package lists are not kept.
#
# The tarball is made again only when this recipe changed (its sha256 is
# kept beside it in .recipe) or DNNLAB_REBUILD_BASE=1: Debian's point
# releases and security updates come in with the next rebuild. Needs root
# (mmdebstrap's root mode) and mmdebstrap (scripts/bootstrap.sh).
# DNNLAB_DEBIAN_MIRROR replaces http://deb.debian.org (a local mirror).
set -euo pipefail

out=${1:?usage: debian_base.sh OUT_DIR}
mkdir -p "$out"
tar=$out/debian-bookworm-slim.tar
mirror=${DNNLAB_DEBIAN_MIRROR:-http://deb.debian.org}

args=(
  --variant=minbase
  --format=tar
  # merged /usr by directory links, as debootstrap makes it, rather than
  # the usrmerge package (which would bring perl along).
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
  # No fsync per file: minutes saved on a busy machine (the official
  # images keep the same setting for later installs).
  --dpkgopt=force-unsafe-io
  --aptopt='APT::Install-Recommends "false"'
  --aptopt='Acquire::Languages "none"'
  --dpkgopt='path-exclude=/usr/share/man/*'
  --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/share/doc/*'
  --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-include=/usr/share/locale/locale.alias'
  --dpkgopt='path-exclude=/usr/share/lintian/*'
  # Leftovers of the build: logs, apt's caches, machine-id (systemd makes one).
  --customize-hook='rm -rf "$1"/var/log/apt/* "$1"/var/log/dpkg.log "$1"/var/cache/ldconfig/aux-cache'
  --customize-hook='rm -f "$1"/etc/machine-id; : >"$1"/etc/machine-id'
  bookworm
  "$tar"
  "deb $mirror/debian bookworm main"
  "deb $mirror/debian bookworm-updates main"
  "deb $mirror/debian-security bookworm-security main"
)

recipe=$(printf '%s\n' "${args[@]}" | sha256sum | cut -d' ' -f1)
if [[ -f $tar && -f $tar.recipe && $(cat "$tar.recipe") == "$recipe" && ${DNNLAB_REBUILD_BASE:-} != 1 ]]; then
  echo "debian_base: $tar is up to date (recipe $recipe)" >&2
  echo "$tar"
  exit 0
fi
rm -f "$tar" "$tar.recipe"
# No standard input: mmdebstrap would read a sources.list from a pipe. The
# system's PATH: mmdebstrap runs python3 (mmtarfilter) once per package,
# and a python3 shim earlier in PATH (pyenv's) costs seconds a start.
PATH=/usr/sbin:/usr/bin:/sbin:/bin mmdebstrap --quiet "${args[@]}" </dev/null >&2
echo "$recipe" >"$tar.recipe"
echo "debian_base: made $tar ($(du -h "$tar" | cut -f1))" >&2
echo "$tar"
