#!/usr/bin/env bash
# Exec a qemu-system-x86_64 that has vfio-user-pci, passing all arguments through:
# the host's if it is new enough, else the one in $CACHE/qemu-root (see provision.sh qemu).
# The cached one runs through that root's own dynamic loader instead of chroot, so it
# sees host paths (vfio-user sockets, job directories) as they are.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

if [[ ${VRNIC_QEMU:-} ]]; then exec "$VRNIC_QEMU" "$@"; fi # explicit override
R=$CACHE/qemu-root
if [[ -f $CACHE/qemu-root.stamp ]] && ! host_qemu_ok; then
  export QEMU_MODULE_DIR=$R/usr/lib/x86_64-linux-gnu/qemu # hw/ui/block modules
  exec "$R/usr/lib64/ld-linux-x86-64.so.2" --library-path "$R/usr/lib/x86_64-linux-gnu" \
    "$R/usr/bin/qemu-system-x86_64" -L "$R/usr/share/qemu" -L "$R/usr/share/seabios" "$@"
fi
host_qemu_ok || die "no QEMU >= $QEMU_MIN_VERSION with vfio-user-pci: run qemu-config/provision.sh qemu"
exec qemu-system-x86_64 "$@"
