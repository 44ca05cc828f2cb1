#!/usr/bin/env bash
# Build vrnic.ko for the pinned guest kernel (qemu-config/versions.env) inside
# the Debian build root, then print the path of the module.
# Usage: guest-driver/kernel/build.sh [MAKE-ARG]...   e.g. build.sh W=1, build.sh clean
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

# in-build-root.sh runs the command in /vrnic/<path of the current directory>
# and exports VRNIC_KVER, the pinned kernel version.
cd "$here"
# shellcheck disable=SC2016 # $VRNIC_KVER and "$@" expand inside the build root
"$repo/qemu-config/in-build-root.sh" \
  sh -c 'exec make KDIR="/usr/lib/modules/$VRNIC_KVER/build" "$@"' make "$@"

case " $* " in *" clean "*) exit 0 ;; esac
[[ -f $here/vrnic.ko ]] || { echo "build.sh: $here/vrnic.ko was not built" >&2; exit 1; }
echo "$here/vrnic.ko"
