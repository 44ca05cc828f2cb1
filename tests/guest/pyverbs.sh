#!/bin/sh
# Runs in a guest as /job/run.sh (tests/pyverbs.sh sets up the job): rdma-core's own test
# suite (/opt/rdma-core-tests/tests) against each vrnic device, in link-mode order:
#   ib    the InfiniBand-mode device ($IB0)
#   roce  the RoCE-mode device paired with eth0 ($ROCE, with --gid $GIDX: the RoCE v2 GID
#         of eth0's IPv4 address, so GID and rdma_cm address agree)
# The suite runs its client and server on the one device (loopback). Each test module gets
# its own python process (tests/guest/pyverbs_module.py), so a crash or a hang (killed after
# MODULE_TIMEOUT seconds) ends only that module. /job/exclude and /job/only hold extended
# regexes of module names to leave out / to keep (empty: all).
# Leaves in /job/results/: modules (the modules run), MODE.MODULE.tsv (the outcomes),
# MODE.MODULE.out (unittest's verbose output), MODE.MODULE.rc (the process's status) and
# MODE.missing when a mode's device is absent.
MODULE_TIMEOUT=600
MYIP=$(cat /job/ip)
# shellcheck source=devices.sh # tests/guest/devices.sh, copied to /job by tests/pyverbs.sh
. /job/devices.sh
find_devices
echo "IB0=$IB0 ROCE=$ROCE GIDX=$GIDX MYIP=$MYIP"
mkdir -p /job/results
if [ ! -f /opt/rdma-core-tests/tests/base.py ] || ! command -v python3 >/dev/null; then
	echo "no rdma-core test suite or no python3 in this guest image"
	exit 1
fi
exclude=$(cat /job/exclude)
only=$(cat /job/only)
for f in /opt/rdma-core-tests/tests/test_*.py; do
	m=${f##*/}
	echo "${m%.py}"
done | grep -Ev "${exclude:-^$}" | grep -E "${only:-.}" >/job/results/modules

for mode in ib roce; do
	case $mode in
	ib) dev=$IB0 args="--dev $IB0" ;;
	roce) dev=$ROCE args="--dev $ROCE --gid $GIDX" ;;
	esac
	if [ -z "$dev" ] || [ "$mode/$GIDX" = roce/ ]; then
		echo "no $mode device (IB0=$IB0 ROCE=$ROCE GIDX=$GIDX)" | tee "/job/results/$mode.missing"
		continue
	fi
	while read -r m; do
		echo "== $mode $m"
		r=/job/results/$mode.$m
		# shellcheck disable=SC2086 # args: one option or value a word
		timeout "$MODULE_TIMEOUT" python3 /job/pyverbs_module.py "$r.tsv" "$m" $args </dev/null >"$r.out" 2>&1
		echo $? >"$r.rc"
	done </job/results/modules
done
echo "pyverbs done"
