#!/usr/bin/env bash
# Runs the README's two set-up commands, one after the other, in a clean clone
# of HEAD on a bare Debian 12 (bookworm, minbase, made with debootstrap from
# Debian's packages) inside a chroot: what a new user's fresh machine does.
# CI's own machine already has every dependency, so it cannot see a missing
# install step; this can. .ci/run calls it after the test suite.
#
#   scripts/bare-debian-check.sh [--keep]   # --keep: leave the chroot for a look
#
# Needs root (debootstrap, mount, chroot) and Debian's package archive. Where
# it cannot make the chroot it prints "bare-debian-check: skipped: <why>" and
# exits 0; a failure of the README's commands inside exits with their status.
# Downloaded packages are kept between runs in /var/cache/tessera (apt's
# archive), and compiler outputs in this machine's own ccache, mounted into the
# chroot: the chroot's Debian compiler is this machine's, and every object but
# the few that name the CUDA toolkit or the clone's path compiles from the same
# command (cmake/TesseraFeatures.cmake), so what CI's own build just compiled
# is not compiled again. Both save time and hide nothing: every package is
# still installed by the project's scripts, and ccache reuses an object only
# for the same compiler, command and preprocessed input (headers included).
# About 17 minutes on 2 cores the first time, less with those caches warm.
# TESSERA_BARE_DEBIAN=skip skips it (a developer's quick CI run).
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
keep=0
[ "${1:-}" = "--keep" ] && keep=1
skip() { echo "bare-debian-check: skipped: $*"; exit 0; }

[ "${TESSERA_BARE_DEBIAN:-}" != skip ] || skip "TESSERA_BARE_DEBIAN=skip"
[ "$(id -u)" -eq 0 ] || skip "not root (debootstrap, mount and chroot need it)"
git rev-parse --verify -q HEAD >/dev/null || skip "not a git checkout with a commit to clone"
if ! command -v debootstrap >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null 2>&1 ||
    skip "debootstrap is not installed and apt-get could not install it"
fi
# The archive this machine's apt uses (deb822 sources first, then sources.list).
mirror=$(grep -h -m1 -oE '^URIs: *[^ ]+' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2; exit}' || true)
[ -n "$mirror" ] || mirror=$(grep -h -m1 -oE '^deb +(\[[^]]*\] +)?[^ ]+' /etc/apt/sources.list 2>/dev/null | awk '{print $NF; exit}' || true)
[ -n "$mirror" ] || skip "no Debian archive found in this machine's apt sources"

# Each README block, as the user would paste it (the first: set-up, build and
# the main job; the second: the test suite).
readme_block() { awk -v want="$1" '/^```(sh|bash)$/{n++; inside=(n==want); next} /^```/{inside=0} inside' README.md; }
first=$(readme_block 1)
second=$(readme_block 2)
[ -n "$first" ] && [ -n "$second" ] || { echo "bare-debian-check: README.md lacks its two \`\`\`sh blocks" >&2; exit 2; }

root=$(mktemp -d /var/tmp/tessera-bare-debian.XXXXXX)
unmount_all() {  # ours, and the one `ip netns add` makes (the multi-host test's)
  for m in var/cache/apt/archives root/.cache/ccache dev sys proc run/netns; do umount -R -l "$root/$m" 2>/dev/null || true; done
}
cleanup() {
  unmount_all
  # --one-file-system: a mount left behind (this machine's ccache, /dev) is not emptied.
  if [ $keep -eq 1 ]; then echo "bare-debian-check: the chroot is kept in $root"; else rm -rf --one-file-system "$root"; fi
}
trap cleanup EXIT

# A minbase Debian, cached as a tarball so that later runs skip the download.
cache=/var/cache/tessera/bookworm-minbase.tgz
if [ ! -s "$cache" ]; then
  echo "bare-debian-check: debootstrap bookworm (minbase) from the Debian archive in apt's sources"
  mkdir -p "$(dirname "$cache")"
  debootstrap --variant=minbase --make-tarball="$cache.part" bookworm "$root.tarball" "$mirror" >/dev/null 2>&1 ||
    { rm -rf "$root.tarball" "$cache.part"; skip "debootstrap could not fetch Debian 12 from $mirror"; }
  rm -rf "$root.tarball"
  mv "$cache.part" "$cache"
fi
debootstrap --variant=minbase --unpack-tarball="$cache" bookworm "$root" "$mirror" >/dev/null 2>&1 ||
  skip "debootstrap could not unpack Debian 12 into $root"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc" 2>/dev/null || skip "this machine does not allow mounting /proc in a chroot"
mount --rbind /sys "$root/sys" && mount --rbind /dev "$root/dev" || skip "this machine does not allow bind mounts"
# This machine's ccache (a folder of the chroot's own where it has none).
ccache_dir=/var/cache/tessera/bare-ccache
if command -v ccache >/dev/null && [ -n "$(ccache -k cache_dir 2>/dev/null)" ]; then ccache_dir=$(ccache -k cache_dir); fi
mkdir -p /var/cache/tessera/bare-apt "$ccache_dir" "$root/root/.cache/ccache"
mount --bind /var/cache/tessera/bare-apt "$root/var/cache/apt/archives"
mount --bind "$ccache_dir" "$root/root/.cache/ccache"

mkdir -p "$root/work"
git clone -q "$top" "$root/work/tessera"
echo "bare-debian-check: commit $(git rev-parse --short HEAD) on a bare Debian 12 in $root (ccache: $ccache_dir)"
dirty=$(git status --porcelain --untracked-files=no | head -1)
[ -z "$dirty" ] || echo "bare-debian-check: note: uncommitted changes are not part of the check"

# As a user would: a login-like environment, no standard input, CI=true.
in_chroot() {
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 CI=true \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c 'cd /work/tessera && set -e && eval "$1"' _ "$1" < /dev/null
}
start=$SECONDS
set +e
echo "bare-debian-check: README command 1: $first"
in_chroot "$first"
rc=$?
if [ $rc -eq 0 ]; then
  echo "bare-debian-check: README command 2: $second"
  in_chroot "$second"
  rc=$?
fi
set -e
minutes=$(( (SECONDS - start) / 60 )); seconds=$(( (SECONDS - start) % 60 ))
if [ $rc -eq 0 ]; then
  echo "bare-debian-check: passed: both README commands on a bare Debian 12 (${minutes} min ${seconds} s)"
else
  echo "bare-debian-check: FAILED with exit status $rc (${minutes} min ${seconds} s)"
fi
exit $rc
