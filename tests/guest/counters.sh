#!/bin/sh
# Runs in a guest as /job/counters.sh (tests/e2e.sh): counters.sh [-a] DEV SPEC CMD...
# runs CMD between two reads of DEV's port counters (`rdma statistic show link DEV/1`, the
# device's counters as the kernel driver exposes them) and checks how far they moved.
# SPEC is space-separated NAME=MIN or NAME=MIN:MAX (a move in MIN..MAX). With -a, per-QP
# counters are on (auto mode, one counter per QP type) while CMD runs, so its QPs count in
# rdma counters of their own (the driver's debug lines must show QPs bound, and as many
# unbound) and the link must still sum to the same moves.
# Prints CMD's output, "counter NAME moved N" per SPEC entry, then "counters: ok" or
# "counters: bad: ..."; exits with CMD's status.
auto=''
[ "$1" != -a ] || { auto=1 && shift; }
dev=$1 spec=$2
shift 2

# value NAME FILE: NAME's value in a saved `rdma statistic show` output (a line of
# NAME VALUE pairs, perhaps wrapped)
value() { awk -v n="$1" '{ for (i = 1; i < NF; i++) if ($i == n) { print $(i + 1); exit } }' "$2"; }

bad=''
rdma statistic show link "$dev/1" >/tmp/counters.before 2>&1
# binds: the driver's debug lines of QPs bound to (or unbound from) rdma counters so far
binds() { dmesg | grep -c "$1 counter [0-9]*\$"; }
if [ -n "$auto" ]; then
	echo 'file vrnic_counters.c +p' >/proc/dynamic_debug/control
	b0=$(binds 'bound to') u0=$(binds 'unbound from')
	rdma statistic qp set link "$dev/1" auto type on || bad=' auto mode refused'
fi
"$@"
rc=$?
if [ -n "$auto" ]; then
	rdma statistic qp set link "$dev/1" auto off || bad="$bad; auto mode not turned off"
	b=$(($(binds 'bound to') - b0)) u=$(($(binds 'unbound from') - u0))
	echo "counter QPs bound $b, unbound $u"
	[ "$b" -ge 1 ] && [ "$b" -eq "$u" ] || bad="$bad; $b QPs bound, $u unbound"
fi
rdma statistic show link "$dev/1" >/tmp/counters.after 2>&1

for s in $spec; do
	name=${s%%=*} range=${s#*=}
	min=${range%%:*} max=${range#*:}
	[ "$max" != "$range" ] || max=''
	a=$(value "$name" /tmp/counters.before) b=$(value "$name" /tmp/counters.after)
	if [ -z "$a" ] || [ -z "$b" ]; then
		bad="$bad $name missing"
		continue
	fi
	d=$((b - a))
	echo "counter $name moved $d"
	if [ "$d" -lt "$min" ] || { [ -n "$max" ] && [ "$d" -gt "$max" ]; }; then
		bad="$bad $name moved $d, not in $min..$max"
	fi
done
if [ -n "$bad" ]; then
	echo "counters: bad:$bad"
	sed 's/^/before: /' /tmp/counters.before
	sed 's/^/after: /' /tmp/counters.after
else
	echo "counters: ok"
fi
exit $rc
