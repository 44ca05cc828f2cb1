#!/bin/sh
# /init (PID 1) of the vrnic test guest; packed into the image by pack-guest.sh.
# Mounts the basics, loads virtio/9p and every module in /opt/vrnic/modules, sets up
# eth0 from vrnic.ip=ADDR/PFX, runs /job/run.sh from the 9p share "job" (output to
# /job/output.log, status to /job/exit_code), then powers off. No share: a shell.
export PATH=/opt/vrnic/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin HOME=/root TERM=linux
say() { echo "vrnic-init: $*" >/dev/console; }

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run

IP='' NAME=vrnic-guest
read -r cmdline </proc/cmdline
for arg in $cmdline; do
  case $arg in
    vrnic.ip=*) IP=${arg#*=} ;;
    vrnic.name=*) NAME=${arg#*=} ;;
  esac
done
hostname "$NAME"

modprobe -a pvpanic_pci virtio_net 9pnet_virtio 9p 2>/dev/null
for ko in /opt/vrnic/modules/*.ko; do
  [ -e "$ko" ] || continue
  deps=$(modinfo -F depends "$ko" | tr , ' ')
  # shellcheck disable=SC2086 # one module name per word
  [ -z "$deps" ] || modprobe -a $deps
  if insmod "$ko"; then say "loaded $ko"; else say "FAILED to load $ko"; fi
done

ip link set lo up
if [ -n "$IP" ]; then
  if [ -e /sys/class/net/eth0 ]; then
    ip addr add "$IP" dev eth0 && ip link set eth0 up && say "eth0 $IP"
  else
    say "no eth0 for vrnic.ip=$IP (no --net-listen/--net-connect?)"
  fi
fi

if mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 job /job 2>/dev/null; then
  if [ -f /job/run.sh ]; then
    say "running /job/run.sh"
    [ -x /job/run.sh ] || chmod +x /job/run.sh
    (cd /job && exec /job/run.sh) </dev/null >/job/output.log 2>&1
    rc=$?
    echo "$rc" >/job/exit_code
    say "job exited with $rc"
  else
    say "no /job/run.sh in the job share"
  fi
  sync
  umount /job
else
  say "no job share: shell on the console (exit to power off)"
  setsid -c /bin/bash -l </dev/ttyS0 >/dev/ttyS0 2>&1
fi
sync
say "poweroff"
busybox poweroff -f
echo o >/proc/sysrq-trigger # not reached unless poweroff failed
sleep 5
