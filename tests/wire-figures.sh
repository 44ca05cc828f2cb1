#!/usr/bin/env bash
# The figures of issue 11 in one run (a measurement, not a test; not in `make test`):
# ib_write_bw 64 KiB and ib_write_lat 8 B between TCG guests four ways, one after the other
# on the same machine, and guest TCP through vrnic's vhost-user-net backend:
#   1. vrnic to vrnic in one process (the in-process path): VRNIC_NET_PERF=1 tests/e2e-net.sh
#   2. vrnic to vrnic across two processes in two namespaces (RoCEv2 on a veth):
#      VRNIC_NET_PERF=1 tests/e2e-twohost.sh
#   3. vrnic to Soft-RoCE and Soft-RoCE to vrnic on one switch: tests/e2e-softroce.sh
#   4. Soft-RoCE to Soft-RoCE on the same switch: tests/e2e-softroce.sh --rxe-pair
# Each step's checks still run (its PASS/FAIL lines are in its log); this prints the
# figures. Logs: $WIRE_FIGURES_DIR (default /tmp/vrnic-wire-figures).
# Usage: tests/wire-figures.sh   (root: namespaces; boots guests)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${WIRE_FIGURES_DIR:-/tmp/vrnic-wire-figures}
mkdir -p "$out"

run() { # run NAME CMD...: the step's output into $out/NAME.log; its verdict line
	local name=$1
	shift
	printf '[%s] %s: %s\n' "$(date +%T)" "$name" "$*" >&2
	"$@" >"$out/$name.log" 2>&1 || true
	grep -E '^e2e-[a-z]+: [0-9]+ passed, [0-9]+ failed' "$out/$name.log" || echo "$name: no verdict"
}

# perftest's table rows for 64 KiB bandwidth and 8 B latency, and netperf's bulk line.
rows='(perf ib_write_(bw|lat): +(65536|8) +[0-9]+ |figure-ib_write_(bw|lat) client: +(65536|8) +[0-9]+ |^bulk: )'

echo "issue 11 figures, $(date -u +%F) on $(nproc) CPUs (TCG guests, MTU 1024)"
run in-process env VRNIC_NET_PERF=1 bash tests/e2e-net.sh
run two-hosts env VRNIC_NET_PERF=1 bash tests/e2e-twohost.sh
run softroce bash tests/e2e-softroce.sh
run softroce-pair bash tests/e2e-softroce.sh --rxe-pair
for step in in-process two-hosts softroce softroce-pair; do
	echo "--- $step (bw: #bytes #iterations peak average MiB/s; lat: #bytes #iterations min max typical avg us)"
	grep -E "$rows" "$out/$step.log" | sort -u || echo "  none"
done
