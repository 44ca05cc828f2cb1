#!/usr/bin/env bash
# Pack the guest image: guest-base.cpio (the provisioned root) followed by a small
# second cpio holding /init (guest-init.sh), the overlay directory and --add files.
# The kernel unpacks both archives in order, so later files replace earlier ones.
#
# Usage: pack-guest.sh [--add SRC:DEST]... [--overlay DIR] [--output FILE]
#   --add SRC:DEST  copy file or directory SRC to DEST in the guest (DEST ending in /
#                   means "into that directory"), e.g. --add build/vrnic.ko:/opt/vrnic/modules/
#   --overlay DIR   tree copied over the root (default $VRNIC_CACHE/guest-overlay, if present)
#   --output FILE   image to write (default $VRNIC_CACHE/guest.cpio; use your own path
#                   when several people test different drivers on one machine)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() { sed -n '2,12s/^# \{0,1\}//p' "$0"; exit "${1:-0}"; }
adds=() overlay=$CACHE/guest-overlay out=$GUEST_CPIO
while (($#)); do
  case $1 in
    --add) [[ ${2:-} == ?*:/* ]] || die "--add wants SRC:/ABS/DEST, got '${2:-}'"; adds+=("$2"); shift 2 ;;
    --overlay) overlay=${2:?}; shift 2 ;;
    --output) out=${2:?}; shift 2 ;;
    -h | --help) usage ;;
    *) echo "unknown argument: $1" >&2; usage 2 ;;
  esac
done
base=$CACHE/guest-base.cpio root=$CACHE/guest-root
[[ -f $base ]] || die "no $base: run qemu-config/provision.sh guest"

tmp=$(mktemp -d "$CACHE/pack.XXXXXX")
at_exit "rm -rf '$tmp'"
stage=$tmp/root
mkdir -m 755 "$stage"
install -m 755 "$QC_DIR/guest-init.sh" "$stage/init"
[[ -d $overlay ]] && cp -a "$overlay/." "$stage/"
for a in "${adds[@]}"; do
  src=${a%%:*} dest=${a#*:}
  [[ -e $src ]] || die "--add: no such file: $src"
  mkdir -p "$stage$(dirname "$dest")"
  [[ $dest == */ ]] && mkdir -p "$stage$dest"
  cp -a "$src" "$stage$dest"
done

# Directories the root already has are left out: an entry for them would reset their
# mode, and /lib, /bin... are symlinks there that must not become directories.
lock_cache -s
(cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | while IFS= read -r p; do
  [[ -d $p && ! -L $p && -e $root/$p ]] || printf '%s\n' "$p"
done | cpio -o -H newc -R 0:0 --quiet) >"$tmp/extra.cpio"
cat "$base" "$tmp/extra.cpio" >"$out.tmp.$$"
mv "$out.tmp.$$" "$out"
log "packed $out ($(du -h "$out" | cut -f1); extra: $(cd "$stage" && find . ! -type d | wc -l) files)"
