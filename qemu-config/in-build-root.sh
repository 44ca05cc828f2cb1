#!/usr/bin/env bash
# Run a command inside the build root (trixie, linux-headers-$KERNEL_VERSION, build tools,
# rdma-core source at /src/rdma-core) with this repository bind-mounted at /vrnic.
# Usage: in-build-root.sh CMD [ARG]...     e.g.
#   in-build-root.sh make -C /usr/lib/modules/\$VRNIC_KVER/build M=/vrnic/guest-driver/kernel
# The command runs in /vrnic (or the matching subdirectory of the current one) with
# VRNIC_KVER=$KERNEL_VERSION and VRNIC_RDMA_CORE=/src/rdma-core set. Mounts are
# undone on exit, also on failure or Ctrl-C. Provisions the build root if needed.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[[ $# -gt 0 && $1 != -h && $1 != --help ]] || { sed -n '2,9s/^# \{0,1\}//p' "$0"; exit 0; }

VRNIC_QUIET=1 "$QC_DIR/provision.sh" build
lock "$BUILD_LOCK" -s # provision waits for us before it replaces the build root
# One user at a time: every checkout is bind-mounted at the same /vrnic and builds in the
# same rdma-core tree, so two at once would build each other's sources.
lock "$CACHE/.build-root-use.lock"
R=$CACHE/build-root
cwd=/vrnic
case $PWD/ in "$REPO_DIR"/*) cwd=/vrnic${PWD#"$REPO_DIR"} ;; esac

mount_rec -t proc proc "$R/proc"
mount_rec --bind /dev "$R/dev"
mount_rec --bind "$REPO_DIR" "$R/vrnic"
rc=0
# shellcheck disable=SC2016 # "$0" and "$@" expand in the root's shell
chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
  TERM="${TERM:-dumb}" VRNIC_KVER="$KERNEL_VERSION" VRNIC_RDMA_CORE=/src/rdma-core \
  /bin/sh -c 'cd "$0" && exec "$@"' "$cwd" "$@" || rc=$?
exit $rc
