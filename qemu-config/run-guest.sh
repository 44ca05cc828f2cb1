#!/usr/bin/env bash
# Boot one guest (TCG) from the cached kernel and guest image (provisioning first if needed).
# Usage: run-guest.sh [options] [-- extra QEMU args]
#   --name N             hostname and QEMU -name                         [vrnic-guest]
#   --mem SIZE           RAM, memfd-backed and shared (vfio-user DMA)    [2G]
#   --smp N              vCPUs                                           [2]
#   --vrnic-socket PATH  attach a vfio-user-pci device served on PATH; repeatable.
#                        The server must already listen (QEMU connects once, at start).
#   --job DIR            share DIR as 9p tag "job": the guest runs DIR/run.sh, writes
#                        DIR/output.log and DIR/exit_code, and powers off
#   --ip ADDR/PFX        eth0 address; link-local 169.254.x.x only
#   --net-listen PATH    eth0 = point-to-point link; this guest listens on UNIX socket PATH
#   --net-connect PATH   eth0 = point-to-point link to the guest listening on PATH
#   --vhost-net PATH     eth0 = vrnic's vhost-user-net port on socket PATH (a device's
#                        net=PATH or `vrnic serve --net`; reconnects if vrnic restarts)
#   --netdev SPEC        eth0 on the QEMU netdev SPEC (its -netdev options without id,
#                        e.g. "stream,server=off,addr.type=unix,addr.path=P"; --mac needed)
#   --mac MAC            eth0's MAC (a RoCE-mode vrnic pairs with the interface of its
#                        own MAC)                  [52:54:00:fe:X:Y from --ip or --name]
#   --pcap FILE          record eth0's frames, both directions, to FILE (filter-dump)
#   --qmp PATH           a QMP monitor on UNIX socket PATH (e.g. to switch --pcap off:
#                        qom-set f0 status off)
#   --timeout SECS       kill QEMU after SECS and exit 124                [no limit]
#   --log FILE           serial console to FILE (default: this terminal, interactive;
#                        Ctrl-A X quits)
#   --initrd FILE        guest image (default: the cache's guest.cpio; see pack-guest.sh)
#   --append ARGS        extra kernel command line
#   --accel A            QEMU accelerator: tcg, or kvm:tcg where KVM works [tcg]
# Exit status: QEMU's (0 when the guest powered off), 124 on timeout.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() { sed -n '2,28s/^# \{0,1\}//p' "$0"; exit "${1:-0}"; }
name=vrnic-guest mem=2G smp=2 timeout=0 accel=tcg
job='' ip='' mac='' listen='' connect='' vhost='' netdev='' pcap='' qmp='' logf='' initrd='' append=''
sockets=() extra=()
while (($#)); do
  case $1 in
    --name) name=${2:?}; shift 2 ;;
    --mem) mem=${2:?}; shift 2 ;;
    --smp) smp=${2:?}; shift 2 ;;
    --vrnic-socket) sockets+=("$(realpath -m "${2:?}")"); shift 2 ;;
    --job) job=$(realpath "${2:?}"); shift 2 ;;
    --ip) ip=${2:?}; shift 2 ;;
    --net-listen) listen=$(realpath -m "${2:?}"); shift 2 ;;
    --net-connect) connect=$(realpath -m "${2:?}"); shift 2 ;;
    --vhost-net) vhost=$(realpath -m "${2:?}"); shift 2 ;;
    --netdev) netdev=${2:?}; shift 2 ;;
    --mac) mac=${2:?}; shift 2 ;;
    --pcap) pcap=$(realpath -m "${2:?}"); shift 2 ;;
    --qmp) qmp=$(realpath -m "${2:?}"); shift 2 ;;
    --timeout) timeout=${2:?}; shift 2 ;;
    --log) logf=${2:?}; shift 2 ;;
    --initrd) initrd=$(realpath "${2:?}"); shift 2 ;;
    --append) append=${2:?}; shift 2 ;;
    --accel) accel=${2:?}; shift 2 ;;
    -h | --help) usage ;;
    --) shift; extra=("$@"); break ;;
    *) echo "unknown option: $1" >&2; usage 2 ;;
  esac
done
[[ -z $ip || $ip =~ ^169\.254\.[0-9]+\.[0-9]+/[0-9]+$ ]] || die "--ip must be link-local 169.254.x.x/PFX, got '$ip'"
[[ -z $listen || -z $connect ]] || die "--net-listen and --net-connect exclude each other"
[[ -z $vhost || -z $listen$connect ]] || die "--vhost-net excludes --net-listen and --net-connect"
[[ $vhost != *,* ]] || die "unsupported character in --vhost-net path: $vhost"
[[ -z $netdev || -z $listen$connect ]] || die "--netdev excludes --net-listen and --net-connect"
[[ -z $vhost || -z $netdev ]] || die "--vhost-net and --netdev exclude each other"
[[ -z $netdev || -n $mac ]] || die "--netdev needs --mac"
[[ $netdev != *id=* ]] || die "--netdev: leave out the id (eth0's netdev is n0)"
[[ -z $pcap || -n $netdev$listen$connect ]] || die "--pcap needs eth0 on --net-listen, --net-connect or --netdev (vhost-user frames bypass QEMU's filters)"
[[ $pcap$qmp != *,* ]] || die "--pcap and --qmp paths must not contain commas"
[[ -z $job || -d $job ]] || die "--job: no such directory: $job"
[[ -z $mac || $mac =~ ^([0-9a-f]{2}:){5}[0-9a-f]{2}$ ]] || die "--mac must be six lower-case hex bytes (52:54:00:12:34:56), got '$mac'"

VRNIC_QUIET=1 "$QC_DIR/provision.sh" qemu guest
[[ -n $initrd ]] || initrd=$GUEST_CPIO

# A panicking guest prints its oops, reboots a second later (panic=1) and so ends QEMU
# (-no-reboot); the console then names the panic. pvpanic's exit-failure would end QEMU
# before the kernel flushed the oops to the serial port.
cmdline="console=ttyS0 rdinit=/init panic=1 vrnic.name=$name${ip:+ vrnic.ip=$ip}${append:+ $append}"
args=(-name "$name" -machine "q35,accel=$accel,memory-backend=mem" -cpu max -smp "$smp" -m "$mem"
  -object "memory-backend-memfd,id=mem,size=$mem,share=on"
  -nodefaults -no-user-config -display none -no-reboot
  -kernel "$KERNEL_IMAGE" -initrd "$initrd" -append "$cmdline"
  -device pvpanic-pci -action panic=none)
if [[ -n $logf ]]; then args+=(-serial "file:$logf"); else args+=(-serial mon:stdio); fi

i=0
for s in "${sockets[@]}"; do
  [[ $s != *[\"\\]* ]] || die "unsupported character in socket path: $s"
  args+=(-device "{\"driver\":\"vfio-user-pci\",\"id\":\"vrnic$i\",\"rombar\":0,\"x-msg-timeout\":10000,\"socket\":{\"type\":\"unix\",\"path\":\"$s\"}}")
  i=$((i + 1))
done
if [[ -n $job ]]; then
  # shellcheck disable=SC2054
  args+=(-fsdev "local,id=jobfs,path=$job,security_model=none"
    -device virtio-9p-pci,fsdev=jobfs,mount_tag=job)
fi
if [[ -n $listen$connect$vhost ]]; then
  # Without --mac: a MAC from the IP (or the name) so the two ends of a link differ.
  if [[ -z $mac ]]; then
    if [[ -n $ip ]]; then IFS=./ read -r _ _ a b _ <<<"$ip"; else a=$(($(cksum <<<"$name" | cut -d' ' -f1) % 256)) b=1; fi
    mac=$(printf '52:54:00:fe:%02x:%02x' "$a" "$b")
  fi
  if [[ -n $vhost ]]; then
    # The socket must listen now: QEMU waits for the backend at start; reconnect-ms brings
    # the interface back after vrnic restarts.
    # shellcheck disable=SC2054 # commas inside QEMU option values
    args+=(-chardev "socket,id=vn0,path=$vhost,reconnect-ms=1000"
      -netdev "vhost-user,id=n0,chardev=vn0")
  elif [[ -n $listen ]]; then
    rm -f "$listen"
    args+=(-netdev "stream,id=n0,server=on,addr.type=unix,addr.path=$listen")
  else
    args+=(-netdev "stream,id=n0,server=off,addr.type=unix,addr.path=$connect,reconnect-ms=200")
  fi
  args+=(-device "virtio-net-pci,netdev=n0,mac=$mac,romfile=")
fi
[[ -z $netdev ]] || args+=(-netdev "${netdev%%,*},id=n0${netdev#"${netdev%%,*}"}" -device "virtio-net-pci,netdev=n0,mac=$mac,romfile=")
[[ -z $pcap ]] || args+=(-object "filter-dump,id=f0,netdev=n0,file=$pcap")
[[ -z $qmp ]] || args+=(-qmp "unix:$qmp,server=on,wait=off")

log "booting $name (${#sockets[@]} vrnic device(s)${job:+, job $job}${ip:+, ip $ip}${logf:+, console $logf})"
rc=0
if ((timeout > 0)); then
  timeout --foreground -k 10 "$timeout" "$QC_DIR/qemu.sh" "${args[@]}" "${extra[@]}" || rc=$?
else
  "$QC_DIR/qemu.sh" "${args[@]}" "${extra[@]}" || rc=$?
fi
if [[ -n $logf ]] && grep -q 'Kernel panic - not syncing' "$logf"; then
  log "$name: kernel panic (its oops is in $logf)"
  exit 1
fi
case $rc in
  0) log "$name powered off" ;;
  124 | 137) log "$name: timeout after ${timeout}s, QEMU killed"; rc=124 ;;
  *) log "$name: QEMU exited with $rc" ;;
esac
exit $rc
