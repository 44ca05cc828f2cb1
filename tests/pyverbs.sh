#!/usr/bin/env bash
# rdma-core's own test suite (pyverbs, /opt/rdma-core-tests/tests in the guest image) against
# vrnic: one guest with an InfiniBand-mode device and a RoCE-mode device paired with its
# virtio-net interface (alone on its network), every test module in its own python process,
# once per device (tests/guest/pyverbs.sh). Prints a table per mode and module (ok, skipped,
# failed, errors, crashed), every failure, and the skip reasons; fails on any failure, error
# or crash, and on a skip whose reason the README's skip table does not list for its module
# ("rdma-core's test suite" in README.md).
# Usage: tests/pyverbs.sh [--only REGEX]   (only the modules whose name matches, e.g. test_srq)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

# Modules for other vendors' hardware, left out: mlx5 (DevX, DR, DC, mkeys, ... through
# mlx5dv), EFA (efadv, SRD QPs) and CUDA (GPU memory as dmabuf).
EXCLUDE='^test_(mlx5_|efa|cuda_)'
PV_IP=169.254.101.1 # the guest's interface: its own link-local subnet, no peer
PV_MAC=52:54:00:fe:65:01
MODES=(ib roce)

only=''
case ${1:-} in
--only) only=${2:?--only REGEX} ;;
'') ;;
*) echo "usage: tests/pyverbs.sh [--only REGEX]" >&2; exit 2 ;;
esac

# readme_skips: the rows of the README's skip table ("## rdma-core's test suite"), as
# "MODULE<TAB>REASON" lines; a REASON is a glob pattern (`*` for a device name, say).
readme_skips() {
	awk -F' [|] ' '
		/^## rdma-core.s test suite/ { in_section = 1; next }
		/^## / { in_section = 0 }
		in_section && /^[|] `test_/ {
			mod = substr($1, 3); reason = $2
			gsub(/`/, "", mod); gsub(/`/, "", reason)
			print mod "\t" reason
		}' "$REPO/README.md"
}

# skip_listed MODULE REASON: the README lists REASON for MODULE.
skip_listed() {
	local m r
	while IFS=$'\t' read -r m r; do
		# shellcheck disable=SC2053 # $r is a glob pattern
		[[ $m != "$1" || $2 != $r ]] || return 0
	done < <(readme_skips)
	return 1
}

# report DIR: the table, the failures and the skip reasons of the results in DIR; returns 1
# on any failure, error, crash or unlisted skip, or when nothing ran.
report() {
	local dir=$1 mode m f rc bad=0 runs=0 crashed last
	local -a failures=() skips=()
	[[ -f $dir/modules ]] || { echo "the guest ran no module (see its console)"; return 1; }
	printf '%-5s %-22s %5s %8s %7s %7s %8s\n' mode module ok skipped failed errors crashed
	for mode in "${MODES[@]}"; do
		if [[ -f $dir/$mode.missing ]]; then
			echo "$mode: $(<"$dir/$mode.missing")"
			bad=1
			continue
		fi
		while read -r m; do
			f=$dir/$mode.$m
			runs=$((runs + 1))
			crashed=0
			if [[ ! -f $f.tsv ]] || [[ $(tail -n 1 "$f.tsv") != 'done' ]]; then
				crashed=1
				rc=$(cat "$f.rc" 2>/dev/null || echo none)
				last=$(awk -F'\t' '$1 == "start" { t = $2 } $1 != "start" { t = "" } END { print t }' "$f.tsv" 2>/dev/null || true)
				failures+=("  $mode $m: crashed (status $rc${last:+, in $last}; its output's tail:)")
				failures+=("$(tail -n 15 "$f.out" 2>/dev/null | sed 's/^/      | /')")
			fi
			touch "$f.tsv"
			awk -F'\t' -v mode="$mode" -v m="$m" -v crashed="$crashed" '
				{ n[$1]++ }
				END { printf "%-5s %-22s %5d %8d %7d %7d %8s\n", mode, m, n["ok"], n["skipped"],
					n["failed"], n["error"], crashed ? "yes" : "-" }' "$f.tsv"
			while IFS=$'\t' read -r outcome id detail; do
				case $outcome in
				failed | error) failures+=("  $mode $outcome ${id#tests.}: $detail") ;;
				skipped) skips+=("$mode"$'\t'"$m"$'\t'"$detail") ;;
				esac
			done <"$f.tsv"
		done <"$dir/modules"
		cat "$dir/$mode".*.tsv | awk -F'\t' -v mode="$mode" '
			{ n[$1]++ }
			END { printf "%-5s %-22s %5d %8d %7d %7d\n", mode, "(all)", n["ok"], n["skipped"],
				n["failed"], n["error"] }'
	done
	((runs > 0)) || { echo "no module ran"; bad=1; }
	if ((${#failures[@]})); then
		bad=1
		echo
		echo "failures, errors and crashes:"
		printf '%s\n' "${failures[@]}"
	fi
	if ((${#skips[@]})); then
		echo
		echo "skip reasons (count, mode, module, reason; 'NOT IN README' fails the run):"
		local count rest reason
		while read -r count rest; do
			IFS=$'\t' read -r mode m reason <<<"$rest"
			if skip_listed "$m" "$reason"; then
				printf '  %4d %-4s %-22s %s\n' "$count" "$mode" "$m" "$reason"
			else
				printf '  %4d %-4s %-22s %s   NOT IN README\n' "$count" "$mode" "$m" "$reason"
				bad=1
			fi
		done < <(printf '%s\n' "${skips[@]}" | sort | uniq -c)
	fi
	return $bad
}

# image_has_suite: the packed guest image (its first archive, the provisioned root) holds
# rdma-core's test suite (grep reads all: -q would end cpio by SIGPIPE, failing the pipe).
image_has_suite() { cpio -t --quiet <"$GUEST_IMAGE" 2>/dev/null | grep '^opt/rdma-core-tests/tests/base\.py$' >/dev/null; }

session_begin pyverbs
build_all
# The cache's guest root is shared: a checkout whose qemu-config/versions.env predates the
# suite, provisioning meanwhile, rebuilds it without. Provision and pack once more then.
if ! image_has_suite; then
	say "the guest image has no rdma-core test suite (guest root provisioned from another versions.env?): again"
	build_all
	image_has_suite || { say "the guest image still has no /opt/rdma-core-tests/tests"; exit 1; }
fi
start_vrnic "pv-ib,lid=1" "pv-roce,link=eth,mac=$PV_MAC"
job=$WORK/p
mkdir -p "$job"
cp "$REPO/tests/guest/pyverbs.sh" "$job/run.sh"
cp "$REPO/tests/guest/devices.sh" "$REPO/tests/guest/pyverbs_module.py" "$job/"
echo "$PV_IP" >"$job/ip"
echo "$EXCLUDE" >"$job/exclude"
echo "$only" >"$job/only"

say "booting the guest; rdma-core's test suite in modes ${MODES[*]}"
t0=$SECONDS
# eth0 on a datagram socket that sends to no one: an interface (up, with an address) for the RoCE
# device to pair with, and no peer.
guest_start p --dev pv-ib --dev pv-roce --ip "$PV_IP/24" --timeout 5400 -- \
	-netdev "dgram,id=n0,local.type=unix,local.path=$WORK/p-net.sock,remote.type=unix,remote.path=$WORK/p-nobody.sock" \
	-device "virtio-net-pci,netdev=n0,mac=$PV_MAC,romfile="
guests_wait || true
say "guest done after $((SECONDS - t0)) s"
rc=0
report "$job/results" | tee "$WORK/report" || rc=1
if ((rc != 0)); then
	show_tails
	# Once more after the tails, so the end of the output (all a CI summary may show) says
	# what failed.
	sed -n '/^failures, errors and crashes:/,/^$/p' "$WORK/report"
	grep 'NOT IN README' "$WORK/report" || true
fi
echo "pyverbs: $([[ $rc == 0 ]] && echo passed || echo FAILED)"
exit $rc
