#!/usr/bin/env bash
# End-to-end check of qemu-config/ (provisions first if needed):
#  1. one guest runs a job: uname -r, lspci -nn, ibv_devices, ip addr;
#  2. two guests joined by -netdev stream ping each other (169.254.100.1 <-> .2) and
#     pass a line over TCP port 18515 (the port perftest exchanges QP data on).
# Usage: selftest.sh       Ends with "N passed, N failed"; exit 0 when all passed.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
# The two linked guests come from the helper the vrnic scripts use (no vrnic here).
. "$QC_DIR/../tests/lib.sh"

"$QC_DIR/provision.sh" qemu guest
session_begin selftest # replaces lib.sh's exit hooks: this script mounts nothing
tmp=$WORK
GUEST_IMAGE=$GUEST_CPIO
pass=0 fail=0
result() { if "${@:2}"; then pass=$((pass + 1)); log "PASS $1"; else fail=$((fail + 1)); log "FAIL $1"; fi; }

# --- 1: one guest
cat >"$tmp/smoke.sh" <<'EOF'
#!/bin/sh
echo "job started at guest uptime $(cut -d' ' -f1 /proc/uptime) s"
uname -r; lspci -nn; ibv_devices; ip addr
EOF
t0=$(date +%s%N)
rc=0; "$QC_DIR/run-job.sh" "$tmp/smoke.sh" --name smoke --ip 169.254.100.1/24 >"$tmp/smoke.out" || rc=$?
t1=$(date +%s%N)
cat "$tmp/smoke.out"
ms=$(((t1 - t0) / 1000000))
log "smoke guest: $((ms / 1000)).$((ms % 1000 / 100)) s from run-job start to power-off"
result "single guest job" [ $rc = 0 ]
result "guest runs kernel $KERNEL_VERSION" grep -qx "$KERNEL_VERSION" "$tmp/smoke.out"
result "9p job share visible in lspci" grep -q 'Virtio filesystem' "$tmp/smoke.out"

# --- 2: two guests on a point-to-point link
mkdir -p "$tmp/a" "$tmp/b"
cat >"$tmp/a/run.sh" <<'EOF'
#!/bin/sh
n=0; until busybox ping -c 1 -W 1 169.254.100.2 >/dev/null 2>&1; do
  n=$((n + 1)); [ $n -lt 120 ] || { echo "peer never answered"; exit 2; }; done
busybox ping -c 3 169.254.100.2 || exit 3
busybox timeout 60 busybox nc -l -p 18515 >/tmp/got || exit 4
echo "received: $(cat /tmp/got)"; grep -q hello-from-b /tmp/got
EOF
cat >"$tmp/b/run.sh" <<'EOF'
#!/bin/sh
n=0; until busybox ping -c 1 -W 1 169.254.100.1 >/dev/null 2>&1; do
  n=$((n + 1)); [ $n -lt 120 ] || { echo "peer never answered"; exit 2; }; done
busybox ping -c 3 169.254.100.1 || exit 3
n=0; until echo hello-from-b | busybox nc -w 2 169.254.100.1 18515; do
  n=$((n + 1)); [ $n -lt 60 ] || exit 4; sleep 1; done
echo "sent hello-from-b"
EOF
chmod +x "$tmp/a/run.sh" "$tmp/b/run.sh"
guest_start a --link --timeout 600
guest_start b --link --timeout 600
guests_wait || show_tails
sed 's/^/[guest-a] /' "$tmp/a/output.log" || true
sed 's/^/[guest-b] /' "$tmp/b/output.log" || true
result "guest-a pinged guest-b and got a TCP line" [ "$(cat "$tmp/a/exit_code" 2>/dev/null)" = 0 ]
result "guest-b pinged guest-a and sent a TCP line" [ "$(cat "$tmp/b/exit_code" 2>/dev/null)" = 0 ]

echo "qemu-config selftest: $pass passed, $fail failed"
((fail == 0))
