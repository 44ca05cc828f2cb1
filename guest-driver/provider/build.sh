#!/usr/bin/env bash
# Build the vrnic rdma-core provider inside the rdma-core source tree of the
# build root (qemu-config/in-build-root.sh) and install it into a guest overlay.
#
# Usage: build.sh [--test] [OUTDIR]
#   --test also builds and runs tests/wqe_test.c (the shared WQE/CQE encoding,
#   byte for byte), tests/datapath_test.c (fake device, no kernel) and
#   tests/verbs_ex_test.c (ibv_wr_* and poll_cq_ex against post_send and
#   poll_cq, same fake device).
#   OUTDIR defaults to ${VRNIC_CACHE:-/var/cache/vrnic}/guest-overlay (copied over
#   the guest root by qemu-config/pack-guest.sh). Installs:
#     OUTDIR/usr/lib/x86_64-linux-gnu/libibverbs/libvrnic-rdmav34.so
#     OUTDIR/etc/libibverbs.d/vrnic.driver          ("driver vrnic")
#
# Inside the root (build.sh --in-root): providers/vrnic is refreshed from this
# directory plus hw-spec/include/vrnic (as providers/vrnic/include/vrnic) and
# guest-driver/common (vrnic_wqe.h, the WQE/CQE encoding shared with the kernel
# driver, as providers/vrnic/common), the add_subdirectory line is added once,
# the tree is configured once into build-vrnic/ and only the vrnic-rdmav34
# target is built, warnings as errors.
set -euo pipefail

if [[ ${1:-} == --in-root ]]; then
  test=${2:-}
  src=${VRNIC_RDMA_CORE:-/src/rdma-core}
  dst=$src/providers/vrnic
  bld=$src/build-vrnic
  # Fresh copy each time, with fresh mtimes: the tree is shared by every checkout, so
  # sources older than the last build (another checkout's) must still rebuild.
  rm -rf "$dst"
  mkdir -p "$dst/include"
  cp -r /vrnic/guest-driver/provider/. "$dst/"
  cp -r /vrnic/hw-spec/include/vrnic "$dst/include/"
  cp -r /vrnic/guest-driver/common "$dst/"
  if ! grep -qx 'add_subdirectory(providers/vrnic)' "$src/CMakeLists.txt"; then
    sed -i '/^add_subdirectory(providers\/vmw_pvrdma)$/a add_subdirectory(providers/vrnic)' \
      "$src/CMakeLists.txt"
    grep -qx 'add_subdirectory(providers/vrnic)' "$src/CMakeLists.txt" ||
      { echo "build.sh: could not add providers/vrnic to $src/CMakeLists.txt" >&2; exit 1; }
  fi
  if [[ ! -f $bld/build.ninja ]]; then
    cmake -S "$src" -B "$bld" -GNinja -DNO_MAN_PAGES=1 -DNO_PYVERBS=1 -DENABLE_WERROR=1
  fi
  ninja -C "$bld" vrnic-rdmav34
  if [[ $test == --test ]]; then
    cflags=(-std=gnu11 -O2 -g -Wall -Wextra -Wno-sign-compare -Wno-unused-parameter -Werror
      -I"$dst/include" -I"$dst/common" -I"$bld/include")
    cc "${cflags[@]}" -o "$bld/vrnic-wqe-test" "$dst/tests/wqe_test.c"
    srcs=("$dst/datapath.c" "$dst/vrnic.c" "$dst/verbs.c" "$dst/srq.c" "$dst/mw.c"
      "$dst/cq_ex.c" "$dst/qp_ex.c" "$dst/xrc.c")
    libs=(-L"$bld/lib" "-Wl,-rpath,$bld/lib" -libverbs -lpthread)
    cc "${cflags[@]}" -o "$bld/vrnic-datapath-test" "$dst/tests/datapath_test.c" \
      "${srcs[@]}" "${libs[@]}"
    cc "${cflags[@]}" -o "$bld/vrnic-verbs-ex-test" "$dst/tests/verbs_ex_test.c" \
      "${srcs[@]}" "${libs[@]}"
    # A hung test would hold the build root every checkout shares.
    timeout 60 "$bld/vrnic-wqe-test"
    timeout 60 "$bld/vrnic-datapath-test"
    timeout 60 "$bld/vrnic-verbs-ex-test"
  fi
  exit 0
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${VRNIC_CACHE:-/var/cache/vrnic}
test=
if [[ ${1:-} == --test ]]; then test=--test; shift; fi
out=${1:-$cache/guest-overlay}
[[ $out == /* ]] || out=$PWD/$out

"$repo/qemu-config/in-build-root.sh" /vrnic/guest-driver/provider/build.sh --in-root $test

so=$cache/build-root/src/rdma-core/build-vrnic/lib/libvrnic-rdmav34.so
libdir=$out/usr/lib/x86_64-linux-gnu/libibverbs
etcdir=$out/etc/libibverbs.d
mkdir -p "$libdir" "$etcdir"
install -m 0644 "$so" "$libdir/libvrnic-rdmav34.so"
printf 'driver vrnic\n' > "$etcdir/vrnic.driver"
echo "installed $libdir/libvrnic-rdmav34.so and $etcdir/vrnic.driver"
