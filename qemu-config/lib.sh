# Shared helpers for the qemu-config/ scripts (sourced, not run).
# shellcheck shell=bash disable=SC2034

QC_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$QC_DIR/.." && pwd)
# shellcheck source=versions.env
. "$QC_DIR/versions.env"
CACHE=${VRNIC_CACHE:-/var/cache/vrnic}

log() { printf '[vrnic %s] %s\n' "$(date +%T)" "$*" >&2; }
note() { [[ -n ${VRNIC_QUIET:-} ]] || log "$@"; } # routine news, hidden when VRNIC_QUIET=1
die() { printf '[vrnic] ERROR: %s\n' "$*" >&2; exit 1; }
[[ $(id -u) == 0 ]] || die "run as root (debootstrap, chroot and mounts need it)"

# The Debian archive the roots are built from: $VRNIC_DEBIAN_MIRROR, or else the one this
# host's apt already uses (its first source ending in /debian, so not a security archive).
debian_mirror() {
  if [[ -n ${VRNIC_DEBIAN_MIRROR:-} ]]; then
    echo "${VRNIC_DEBIAN_MIRROR%/}"
    return
  fi
  local uri
  uri=$({
    sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | tr ' ' '\n'
    sed -nE 's/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+).*/\2/p' \
      /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null
  } | grep -E '/debian/?$' | head -n 1) || true
  [[ -n $uri ]] || die "no Debian archive in this host's apt sources: set VRNIC_DEBIAN_MIRROR"
  echo "${uri%/}"
}

# --- locking (flock, held until the script exits)
lock() { # lock FILE [-s]: exclusive, or shared with -s
  local f=$1 fd; shift
  mkdir -p "$CACHE"
  exec {fd}>"$f"
  flock -n "$@" "$fd" || { log "waiting for the lock $f"; flock "$@" "$fd"; }
}
# One writer of the cache at a time; nested calls (provision -> pack-guest) reuse the lock.
lock_cache() { # lock_cache [-s]
  [[ -n ${VRNIC_LOCK_HELD:-} ]] && return 0
  lock "$CACHE/.lock" "$@"
  export VRNIC_LOCK_HELD=1
}
# in-build-root.sh holds this shared while it runs; replacing the build root takes it exclusively.
BUILD_LOCK=$CACHE/.build-root.lock

# --- mounts: every mount is recorded and undone on exit, even on failure.
MOUNTS=()
mount_rec() { mount "$@" || return; MOUNTS+=("${*: -1}"); }
umount_all() {
  local i
  for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
    umount "${MOUNTS[i]}" 2>/dev/null || umount -l "${MOUNTS[i]}" || true
  done
  MOUNTS=()
}
EXIT_HOOKS=() # extra commands for scripts to run at exit: at_exit 'rm -rf "$tmp"'
at_exit() { EXIT_HOOKS+=("$1"); }
run_exit_hooks() {
  local h
  umount_all
  for h in "${EXIT_HOOKS[@]}"; do eval "$h" || true; done
}
trap run_exit_hooks EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mounts_under() { awk -v d="$1" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/self/mounts; }

# Delete a directory tree, refusing if anything is still mounted below it
# (a bind-mounted /dev inside a root would otherwise be wiped).
safe_rm() {
  [[ -e $1 ]] || return 0
  [[ -z $(mounts_under "$1") ]] || die "refusing to delete $1: still mounted: $(mounts_under "$1" | xargs)"
  rm -rf --one-file-system "$1"
}

# Run a command inside a Debian root with /proc and /dev mounted; unmounted afterwards.
in_root() { # in_root ROOT CMD...
  local root=$1; shift
  local n=${#MOUNTS[@]} rc=0
  if mount_rec -t proc proc "$root/proc" && mount_rec --bind /dev "$root/dev"; then
    chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
      DEBIAN_FRONTEND=noninteractive TERM="${TERM:-dumb}" "$@" || rc=$?
  else
    rc=1
  fi
  while ((${#MOUNTS[@]} > n)); do # undo just our own mounts, newest first
    umount "${MOUNTS[-1]}" 2>/dev/null || umount -l "${MOUNTS[-1]}"
    unset 'MOUNTS[-1]'
  done
  return $rc
}

# --- stamps: NAME is fresh when $CACHE/NAME exists and NAME.stamp holds the expected text.
is_fresh() { [[ -e $CACHE/$1 && -f $CACHE/$1.stamp && $(<"$CACHE/$1.stamp") == "$2" ]]; }
publish() { # publish NAME STAMP: move NAME.new into place and record its stamp
  rm -f "$CACHE/$1.stamp"
  safe_rm "$CACHE/$1"
  mv "$CACHE/$1.new" "$CACHE/$1"
  printf '%s\n' "$2" >"$CACHE/$1.stamp"
}

# --- QEMU selection
version_ge() { [[ $(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1) == "$2" ]]; }
host_qemu_ok() {
  local v
  command -v qemu-system-x86_64 >/dev/null || return 1
  v=$(qemu-system-x86_64 --version | sed -n '1s/.*version \([0-9.]*\).*/\1/p')
  version_ge "${v:-0}" "$QEMU_MIN_VERSION" &&
    qemu-system-x86_64 -device help 2>/dev/null | grep -q '"vfio-user-pci"'
}

KERNEL_IMAGE=$CACHE/kernel/boot/vmlinuz-$KERNEL_VERSION
GUEST_CPIO=$CACHE/guest.cpio
