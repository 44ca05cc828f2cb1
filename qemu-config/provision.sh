#!/usr/bin/env bash
# Build (or reuse) the cached QEMU, guest kernel, guest image and build root.
# Usage: provision.sh [qemu|kernel|guest|build|all|clean]...   (default: all)
# Idempotent: each part is rebuilt only when its stamp (versions.env + REV) changed.
# clean deletes the whole cache (waits for running in-build-root.sh; never rm -rf it by hand).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

REV=2 # bump to force a rebuild of every part after changing how parts are made
DEBIAN_MIRROR=$(debian_mirror)

host_tools() {
  local missing=() t
  for t in debootstrap cpio; do command -v $t >/dev/null || missing+=("$t"); done
  ((${#missing[@]})) || return 0
  log "installing host tools: ${missing[*]}"
  apt-get update -qq -o DPkg::Lock::Timeout=300
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 \
    --no-install-recommends "${missing[@]}" >/dev/null
}

# Run a step with its output in $CACHE/logs/NAME.log; show the tail if it fails.
logged() { # logged NAME CMD...
  local name=$1; shift
  mkdir -p "$CACHE/logs"
  "$@" >"$CACHE/logs/$name.log" 2>&1 ||
    { tail -n 30 "$CACHE/logs/$name.log" >&2; die "$name failed (full log: $CACHE/logs/$name.log)"; }
}

apt_in() { # apt_in ROOT ARGS...: apt-get inside a root, quiet and without recommends
  local root=$1; shift
  in_root "$root" apt-get -y -q -o APT::Sandbox::User=root --no-install-recommends "$@"
}

# Plain minbase root; every other root starts as a copy of it.
base_root() {
  local stamp="base $DEBIAN_SUITE rev=$REV" b=$CACHE/base-root.new
  is_fresh base-root "$stamp" && return 0
  log "debootstrap $DEBIAN_SUITE (minbase) -> $CACHE/base-root"
  safe_rm "$b"
  logged debootstrap debootstrap --variant=minbase "$DEBIAN_SUITE" "$b" "$DEBIAN_MIRROR"
  # Nothing installed later brings docs, man pages or locales; no daemon starts in a chroot.
  printf '%s\n' 'path-exclude=/usr/share/doc/*' 'path-exclude=/usr/share/man/*' \
    'path-exclude=/usr/share/info/*' 'path-exclude=/usr/share/locale/*' \
    'path-exclude=/usr/share/lintian/*' >"$b/etc/dpkg/dpkg.cfg.d/01-vrnic-nodoc"
  printf '#!/bin/sh\nexit 101\n' >"$b/usr/sbin/policy-rc.d" && chmod 755 "$b/usr/sbin/policy-rc.d"
  publish base-root "$stamp"
}

# Start NAME.new as a copy of the base root with the given apt source lines.
new_root() { # new_root NAME SOURCE-LINE...
  local r=$CACHE/$1.new; shift
  base_root
  safe_rm "$r"
  cp -a "$CACHE/base-root" "$r"
  printf '%s\n' "$@" >"$r/etc/apt/sources.list"
  cp -L /etc/resolv.conf "$r/etc/resolv.conf" 2>/dev/null || true
  logged "$(basename "$r")-update" apt_in "$r" update
}

strip_root() { # drop docs, caches and package lists from a finished root
  rm -rf "$1"/usr/share/{doc,man,info,lintian} "$1"/var/lib/apt/lists/* \
    "$1"/var/cache/apt/* "$1"/var/cache/debconf/*-old "$1"/var/log/*
  find "$1/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} + 2>/dev/null || true
}

provision_qemu() {
  if host_qemu_ok; then
    note "qemu: host $(qemu-system-x86_64 --version | head -1) has vfio-user-pci: using it"
    return 0
  fi
  local stamp="qemu $DEBIAN_SUITE $QEMU_SUITE $QEMU_PACKAGES rev=$REV"
  is_fresh qemu-root "$stamp" && { note "qemu: cached ($CACHE/qemu-root)"; return 0; }
  log "qemu: building $CACHE/qemu-root ($QEMU_PACKAGES from $QEMU_SUITE)"
  new_root qemu-root "deb $DEBIAN_MIRROR $DEBIAN_SUITE main" "deb $DEBIAN_MIRROR $QEMU_SUITE main"
  logged qemu-install apt_in "$CACHE/qemu-root.new" install -t "$QEMU_SUITE" $QEMU_PACKAGES
  strip_root "$CACHE/qemu-root.new"
  publish qemu-root "$stamp"
  "$QC_DIR/qemu.sh" -device help | grep -q '"vfio-user-pci"' ||
    die "the QEMU in $CACHE/qemu-root has no vfio-user-pci device"
  log "qemu: $("$QC_DIR/qemu.sh" --version | head -1)"
}

# apt-get on the host, but with a private trixie package list (downloads only).
host_apt() {
  local d=$CACHE/apt
  mkdir -p "$d/lists/partial" "$d/cache/archives/partial" "$d/empty"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $DEBIAN_MIRROR $DEBIAN_SUITE main" >"$d/sources.list"
  touch "$d/status"
  apt-get -q -o Dir::Etc::SourceList="$d/sources.list" -o Dir::Etc::SourceParts="$d/empty" \
    -o Dir::Etc::Preferences="$d/empty/none" -o Dir::Etc::PreferencesParts="$d/empty" \
    -o Dir::State::Lists="$d/lists" -o Dir::State::Status="$d/status" \
    -o Dir::Cache="$d/cache" -o APT::Sandbox::User=root "$@"
}

provision_kernel() {
  local stamp="kernel $DEBIAN_SUITE $KERNEL_VERSION rev=$REV" k=$CACHE/kernel.new
  is_fresh kernel "$stamp" && { note "kernel: cached ($KERNEL_VERSION)"; return 0; }
  log "kernel: fetching linux-image-$KERNEL_VERSION"
  logged kernel-apt-update host_apt update
  safe_rm "$k" && mkdir -p "$k"
  if ! (cd "$k" && host_apt download "linux-image-$KERNEL_VERSION" >"$CACHE/logs/kernel.log" 2>&1); then
    die "linux-image-$KERNEL_VERSION is not in $DEBIAN_SUITE (any more?). Available:" \
      "$(host_apt search --names-only '^linux-image-[0-9.]+\+deb[0-9]+-amd64$' 2>/dev/null | cut -d' ' -f1 | xargs)." \
      "Set KERNEL_VERSION in qemu-config/versions.env."
  fi
  dpkg-deb -x "$k"/linux-image-*.deb "$k" && rm -f "$k"/linux-image-*.deb
  publish kernel "$stamp"
}

check_version() { # check_version ROOT PACKAGE PREFIX
  local v
  # shellcheck disable=SC2016 # a dpkg-query format, not a shell expansion
  v=$(chroot "$1" dpkg-query -W -f='${Version}' "$2")
  [[ $v == "$3"* ]] || die "$2 is $v in $DEBIAN_SUITE, pinned $3 (versions.env)"
}

provision_guest() {
  provision_kernel
  local stamp="guest $DEBIAN_SUITE $KERNEL_VERSION rdma-core=$RDMA_CORE_VERSION $GUEST_PACKAGES prune=$GUEST_MODULES_PRUNE rev=$REV"
  local g=$CACHE/guest-root.new d
  if is_fresh guest-root "$stamp" && [[ -f $CACHE/guest-base.cpio ]]; then
    note "guest: cached ($CACHE/guest-root)"
  else
    log "guest: building $CACHE/guest-root"
    new_root guest-root "deb $DEBIAN_MIRROR $DEBIAN_SUITE main"
    # rdma-core's own test suite ships (partly gzipped) under /usr/share/doc, which the base
    # root excludes: let dpkg keep it, then move it to /opt/rdma-core-tests/tests.
    echo 'path-include=/usr/share/doc/rdma-core/tests*' >"$g/etc/dpkg/dpkg.cfg.d/02-vrnic-rdma-tests"
    mkdir -p "$g/usr/share/doc/rdma-core" # excluded itself, so dpkg would not create it
    # shellcheck disable=SC2086 # one package per word
    logged guest-install apt_in "$g" install $GUEST_PACKAGES
    check_version "$g" libibverbs1 "$RDMA_CORE_VERSION-"
    mkdir -p "$g/opt/rdma-core-tests"
    mv "$g/usr/share/doc/rdma-core/tests" "$g/opt/rdma-core-tests/tests"
    gunzip -f "$g"/opt/rdma-core-tests/tests/*.gz
    mkdir -p "$g/usr/lib/modules" "$g/opt/vrnic/modules" "$g/job"
    cp -a "$CACHE/kernel/usr/lib/modules/$KERNEL_VERSION" "$g/usr/lib/modules/"
    for d in $GUEST_MODULES_PRUNE; do rm -rf "$g/usr/lib/modules/$KERNEL_VERSION/kernel/$d"; done
    chroot "$g" depmod "$KERNEL_VERSION"
    strip_root "$g"
    rm -rf "$g"/usr/lib/udev/hwdb.* "$g"/usr/lib/x86_64-linux-gnu/gconv # no udev, no iconv
    rm -f "$CACHE/guest-base.cpio"
    publish guest-root "$stamp"
    log "guest: packing $CACHE/guest-base.cpio"
    (cd "$CACHE/guest-root" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) >"$CACHE/guest-base.cpio.tmp"
    mv "$CACHE/guest-base.cpio.tmp" "$CACHE/guest-base.cpio"
  fi
  # The image is base + /init + overlay: repack when any of them is newer than it.
  if [[ ! $GUEST_CPIO -nt $CACHE/guest-base.cpio || ! $GUEST_CPIO -nt $QC_DIR/guest-init.sh ||
        -n $(find "$CACHE/guest-overlay" -newer "$GUEST_CPIO" 2>/dev/null | head -1) ]]; then
    "$QC_DIR/pack-guest.sh"
  fi
  note "guest: $(du -h "$GUEST_CPIO" | cut -f1) $GUEST_CPIO, kernel $KERNEL_IMAGE"
}

provision_clean() { # safe_rm refuses trees that still have something mounted in them
  local p
  lock "$BUILD_LOCK"
  for p in "$CACHE"/*; do safe_rm "$p"; done
  log "clean: emptied $CACHE"
}

provision_build() {
  local stamp="build $DEBIAN_SUITE $KERNEL_VERSION rdma-core=$RDMA_CORE_VERSION $BUILD_PACKAGES rev=$REV"
  local b=$CACHE/build-root.new tarball=rdma-core_$RDMA_CORE_VERSION.orig.tar.gz
  is_fresh build-root "$stamp" && { note "build: cached ($CACHE/build-root)"; return 0; }
  log "build: building $CACHE/build-root (headers $KERNEL_VERSION, rdma-core $RDMA_CORE_VERSION source)"
  lock "$BUILD_LOCK"
  new_root build-root "deb $DEBIAN_MIRROR $DEBIAN_SUITE main" "deb-src $DEBIAN_MIRROR $DEBIAN_SUITE main"
  # INITRD=No: the headers pull in the kernel image; its initramfs is never used here.
  # shellcheck disable=SC2086 # one package per word
  logged build-install in_root "$b" env INITRD=No apt-get -y -q -o APT::Sandbox::User=root \
    --no-install-recommends install "linux-headers-$KERNEL_VERSION" $BUILD_PACKAGES
  mkdir -p "$b/src/rdma-core" "$b/vrnic"
  # The .dsc may 404 while the tarballs arrive: judge by the tarball, not the exit code.
  in_root "$b" sh -c 'cd /src && apt-get source -q -o APT::Sandbox::User=root --download-only rdma-core' \
    >"$CACHE/logs/build-source.log" 2>&1 || true
  [[ -f $b/src/$tarball ]] || die "no $tarball from $DEBIAN_SUITE (see $CACHE/logs/build-source.log)"
  tar -xzf "$b/src/$tarball" -C "$b/src/rdma-core" --strip-components=1
  [[ -d $b/usr/lib/modules/$KERNEL_VERSION/build ]] || die "no headers for $KERNEL_VERSION in build root"
  publish build-root "$stamp"
  log "build: ready ($CACHE/build-root, $(du -sh "$CACHE/build-root" | cut -f1))"
}

(($#)) || set -- all
for part in "$@"; do
  case $part in
    qemu | kernel | guest | build | all | clean) ;;
    -h | --help) sed -n '2,5s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) die "unknown part '$part' (qemu|kernel|guest|build|all|clean)" ;;
  esac
done
lock_cache
[[ " $* " == *" clean "* ]] || host_tools
for part in "$@"; do
  if [[ $part == all ]]; then provision_qemu; provision_guest; provision_build; else "provision_$part"; fi
done
