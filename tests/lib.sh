# The one "boot guests on vrnic" helper, sourced by every script that boots guests
# (tests/demo.sh, tests/e2e.sh, guest-driver/kernel/tests/guest-smoke.sh,
# qemu-config/launch.sh, qemu-config/selftest.sh):
#   session_begin NAME        work directory $WORK; guests and vrnic are torn down at exit
#   build_all [PROFILE [IMAGE OVERLAY]]   provision, build vrnic, vrnic.ko, the provider, pack
#   start_vrnic SPEC...       one `vrnic serve` process, one device per SPEC (NAME,opts),
#                             its control socket at $WORK/control.sock (vrnic_ctl ARGS...)
#   guest_start ROLE [OPT]... boot a guest in the background (guest_run: in the foreground)
#   guests_wait               wait for the guests started; GUEST_RC[ROLE] holds their status
#   show_tails                guest consoles and vrnic's log, for a failure report
#   wait_sockets LOG PATH...  wait until each PATH listens (a server started by hand)
# Roles a and b started with --link are the two linked guests: a virtio-net point-to-point
# link ($WORK/link.sock), a = 169.254.100.1 (listens), b = 169.254.100.2 (connects), with
# the MACs $LINK_A_MAC and $LINK_B_MAC. A RoCE-mode device given a guest's MAC
# (roce_spec ROLE NAME) pairs with that guest's interface.
# shellcheck shell=bash
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${VRNIC_CACHE:-/var/cache/vrnic}
E2E_IMAGE=$CACHE/e2e.cpio
GUEST_IMAGE=$E2E_IMAGE # what guest_start boots; build_all sets it
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
[[ $TARGET_DIR == /* ]] || TARGET_DIR=$REPO/$TARGET_DIR
VRNIC_BIN=$TARGET_DIR/release/vrnic
LINK_A_IP=169.254.100.1
LINK_B_IP=169.254.100.2
LINK_A_MAC=52:54:00:fe:64:01
LINK_B_MAC=52:54:00:fe:64:02
# IPv6 of the linked guests when they run Linux Soft-RoCE (softroce_job), and as GIDs.
LINK_A_IP6=fd00:64::1
LINK_B_IP6=fd00:64::2
LINK_A_GID6=fd00:0064:0000:0000:0000:0000:0000:0001
LINK_B_GID6=fd00:0064:0000:0000:0000:0000:0000:0002
WORK=''
VRNIC_PID=''
GUEST_ROLES=()
declare -gA GUEST_PID=() GUEST_RC=()

say() { printf '[e2e %s] %s\n' "$(date +%T)" "$*" >&2; }

# session_begin NAME: creates WORK=/tmp/vrnic-NAME.XXXXXX. At exit (also on Ctrl-C or
# SIGTERM) the guests still running and vrnic are stopped and WORK is removed, unless
# VRNIC_KEEP is set.
session_begin() {
	WORK=$(mktemp -d "/tmp/vrnic-$1.XXXXXX")
	trap session_end EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM HUP
}

session_end() {
	local role
	for role in "${!GUEST_PID[@]}"; do
		# Each background guest leads its own process group (run-guest.sh, timeout, QEMU).
		kill -- "-${GUEST_PID[$role]}" 2>/dev/null || true
		wait "${GUEST_PID[$role]}" 2>/dev/null || true
	done
	stop_vrnic
	[[ -n $WORK ]] || return 0
	if [[ -n ${VRNIC_KEEP:-} ]]; then say "kept $WORK"; else rm -rf "$WORK"; fi
}

# build_all [PROFILE [IMAGE OVERLAY]]: provisions the cache, builds vrnic (PROFILE release
# or debug), vrnic.ko and the rdma-core provider (into the directory OVERLAY) and packs them
# into the guest image IMAGE (default: the shared $E2E_IMAGE), which guest_start then boots.
build_all() {
	local profile=${1:-release} image=${2:-$E2E_IMAGE} overlay=${3:-$CACHE/e2e-provider}
	local flags=()
	[[ $profile == debug ]] || flags=(--release)
	bash "$REPO/qemu-config/provision.sh" all
	say "building vrnic ($profile)"
	(cd "$REPO" && cargo build -q "${flags[@]}" -p vrnic --bin vrnic)
	VRNIC_BIN=$TARGET_DIR/$profile/vrnic
	say "building vrnic.ko"
	bash "$REPO/guest-driver/kernel/build.sh" >/dev/null
	say "building the rdma-core provider"
	bash "$REPO/guest-driver/provider/build.sh" "$overlay" >/dev/null
	bash "$REPO/qemu-config/pack-guest.sh" --output "$image" --overlay "$overlay" \
		--add "$REPO/guest-driver/kernel/vrnic.ko:/opt/vrnic/modules/"
	GUEST_IMAGE=$image
}

# start_vrnic SPEC...: one `vrnic serve` serving a device per SPEC (NAME,lid=N,...) on
# $WORK/NAME.sock, and its control socket on $WORK/control.sock, logging to
# $WORK/vrnic.log; returns once every socket listens.
start_vrnic() {
	local args=() spec n
	for spec in "$@"; do
		args+=(--device "${spec%%,*},socket=$WORK/${spec%%,*}.sock,${spec#*,}")
	done
	# shellcheck disable=SC2086 # VRNIC_SERVE_ARGS: extra options, e.g. --poll-idle-us 0
	RUST_LOG=${RUST_LOG:-info} "$VRNIC_BIN" serve "${args[@]}" --control "$WORK/control.sock" \
		${VRNIC_SERVE_ARGS:-} >"$WORK/vrnic.log" 2>&1 &
	VRNIC_PID=$!
	for spec in "$@"; do
		wait_sockets "$WORK/vrnic.log" "$WORK/${spec%%,*}.sock" || return 1
	done
}

# wait_sockets LOG PATH...: waits (10 s at most) until each PATH is a listening socket;
# shows LOG (the server's) and fails if one is not.
wait_sockets() {
	local log=$1 path n
	shift
	for path in "$@"; do
		n=0
		until [[ -S $path ]]; do
			((n++ < 100)) || { cat "$log" >&2; return 1; }
			sleep 0.1
		done
	done
}

# roce_spec ROLE NAME: the start_vrnic SPEC of a RoCE-mode device NAME for linked guest ROLE
# (its MAC is that guest's interface's).
roce_spec() {
	case $1 in
	a) echo "$2,link=eth,mac=$LINK_A_MAC" ;;
	b) echo "$2,link=eth,mac=$LINK_B_MAC" ;;
	*) say "roce_spec: only roles a and b are linked, not '$1'"; return 2 ;;
	esac
}

# vrnic_ctl ARGS...: `vrnic ctl` against the running vrnic (e.g. vrnic_ctl --json devices).
vrnic_ctl() {
	"$VRNIC_BIN" ctl --control "$WORK/control.sock" "$@"
}

# stop_vrnic [SIGNAL]: stops vrnic (SIGTERM, or SIGNAL) and reaps it.
stop_vrnic() {
	[[ -n $VRNIC_PID ]] || return 0
	kill "-${1:-TERM}" "$VRNIC_PID" 2>/dev/null || true
	wait "$VRNIC_PID" 2>/dev/null || true
	VRNIC_PID=''
}

# guest_args ROLE [--link] [--dev NAME]... [run-guest.sh option]...: GUEST_ARGS for guest-ROLE.
# --dev NAME attaches the device start_vrnic serves as NAME; $WORK/ROLE is the guest's job
# directory when it holds run.sh. The options (after $VRNIC_GUEST_ARGS, e.g. --smp 1) come
# last, so they override the defaults.
guest_args() {
	local role=$1
	shift
	GUEST_ARGS=(--initrd "$GUEST_IMAGE" --name "guest-$role" --mem 2G)
	if [[ ${1:-} == --link ]]; then
		shift
		case $role in
		a) GUEST_ARGS+=(--ip "$LINK_A_IP/24" --mac "$LINK_A_MAC" --net-listen "$WORK/link.sock") ;;
		b) GUEST_ARGS+=(--ip "$LINK_B_IP/24" --mac "$LINK_B_MAC" --net-connect "$WORK/link.sock") ;;
		*) say "guest_args: only roles a and b are linked, not '$role'"; return 2 ;;
		esac
	fi
	while [[ ${1:-} == --dev ]]; do
		GUEST_ARGS+=(--vrnic-socket "$WORK/${2:?--dev NAME}.sock")
		shift 2
	done
	[[ ! -f $WORK/$role/run.sh ]] || GUEST_ARGS+=(--job "$WORK/$role")
	# shellcheck disable=SC2206 # VRNIC_GUEST_ARGS: extra run-guest.sh options, split on spaces
	GUEST_ARGS+=(${VRNIC_GUEST_ARGS:-} "$@")
}

# guest_start ROLE [OPTION]... [-- QEMU-ARGS]: boots guest-ROLE in the background (options as
# guest_args; QEMU-ARGS go to QEMU as run-guest.sh passes them),
# its console in $WORK/ROLE/console.log.
guest_start() {
	local role=$1
	shift
	guest_args "$role" "$@"
	mkdir -p "$WORK/$role"
	# Job control on for this one job: the guest gets its own process group (for
	# session_end), in the same session: setsid would also put it in its own scheduler
	# autogroup and change how the guests and vrnic share the CPUs.
	set -m
	"$REPO/qemu-config/run-guest.sh" --log "$WORK/$role/console.log" "${GUEST_ARGS[@]}" &
	GUEST_PID[$role]=$!
	set +m
	GUEST_ROLES+=("$role")
}

# guest_run ROLE [OPTION]...: boots guest-ROLE on this terminal and returns when it ends.
guest_run() {
	local role=$1
	shift
	guest_args "$role" "$@"
	"$REPO/qemu-config/run-guest.sh" "${GUEST_ARGS[@]}"
}

guest_running() { [[ -n ${GUEST_PID[$1]:-} ]] && kill -0 "${GUEST_PID[$1]}" 2>/dev/null; }

# guests_wait: waits for every guest started; GUEST_RC[ROLE] is run-guest.sh's status
# (0: powered off, 124: timeout). Returns 1, naming them, if any did not power off.
guests_wait() {
	local role rc=0
	for role in "${GUEST_ROLES[@]}"; do
		[[ -n ${GUEST_PID[$role]:-} ]] || continue
		GUEST_RC[$role]=0
		wait "${GUEST_PID[$role]}" || GUEST_RC[$role]=$?
		unset "GUEST_PID[$role]"
		((GUEST_RC[$role] == 0)) || { say "guest $role exited with ${GUEST_RC[$role]}"; rc=1; }
	done
	return $rc
}

# show_tails: the end of every guest's console and of vrnic's log, on stderr.
show_tails() {
	local role
	for role in "${GUEST_ROLES[@]}"; do
		say "guest $role console tail:"
		tail -n 20 "$WORK/$role/console.log" >&2 || true
	done
	say "vrnic log tail:"
	tail -n 30 "$WORK/vrnic.log" >&2 || true
}

# softroce_job ROLE: as suite_job, for a guest of the stock image running Linux Soft-RoCE
# instead of vrnic (tests/guest/softroce.sh: rdma_rxe on eth0, then the suite; its commands
# also see RXE, GID4, GID6, MYIP6 and PEER6): linked role a or b, eth0 MTU
# ${SOFTROCE_MTU:-9000} (rxe's active MTU 4096), and the IPv6 address LINK_A_IP6 or
# LINK_B_IP6 (PEER6 is b's). Its other end may be a vrnic guest on the same link.
softroce_job() {
	suite_job "$1"
	mv "$WORK/$1/run.sh" "$WORK/$1/suite.sh"
	cp "$REPO/tests/guest/softroce.sh" "$WORK/$1/run.sh"
	cp "$REPO/tests/guest/softroce_verbs.py" "$WORK/$1/"
	echo "${SOFTROCE_MTU:-9000}" >"$WORK/$1/mtu"
	echo "$LINK_B_IP6" >"$WORK/$1/peer6"
	case $1 in
	a) echo "$LINK_A_IP6/64" >"$WORK/$1/ip6" && echo "$LINK_A_GID6" >"$WORK/$1/gid6" ;;
	b) echo "$LINK_B_IP6/64" >"$WORK/$1/ip6" && echo "$LINK_B_GID6" >"$WORK/$1/gid6" ;;
	esac
}

# suite_job ROLE: makes $WORK/ROLE the job directory of tests/guest/suite.sh in guest-ROLE,
# with the test list read from stdin (tests/guest/suite.sh tells its format).
suite_job() {
	mkdir -p "$WORK/$1"
	cp "$REPO/tests/guest/suite.sh" "$WORK/$1/run.sh"
	cp "$REPO/tests/guest/devices.sh" "$WORK/$1/devices.sh"
	cp "$REPO/tests/guest/counters.sh" "$WORK/$1/counters.sh"
	cp "$REPO/tests/guest/pcap.sh" "$WORK/$1/pcap.sh"
	echo "$1" >"$WORK/$1/role"
	echo "$LINK_B_IP" >"$WORK/$1/peer"
	case $1 in
	a) echo "$LINK_A_IP" >"$WORK/$1/ip" && echo "$LINK_B_IP" >"$WORK/$1/other" ;;
	b) echo "$LINK_B_IP" >"$WORK/$1/ip" && echo "$LINK_A_IP" >"$WORK/$1/other" ;;
	esac
	cat >"$WORK/$1/tests"
}

# Result checks of an e2e script over its collected output file $out, counted in $pass and
# $fail (the script sets out, pass=0 fail=0, and ends with its verdict).
# check NAME PATTERN: $out must contain PATTERN (extended regex).
check() {
	# shellcheck disable=SC2154 # out: set by the calling script
	if grep -qE -- "$2" "$out"; then
		echo "PASS $1"
		pass=$((pass + 1))
	else
		echo "FAIL $1 (no /$2/)"
		fail=$((fail + 1))
	fi
}

# check_tcp_exact NAME [PREFIX]: tests/guest/netperf.py's 4 MiB "exact" stream, its lines
# in $out after PREFIX: the sender's hash, the one the receiver reported back and the one
# the server printed are the same.
check_tcp_exact() {
	local p=${2:-} sent
	sent=$(grep -oE "^${p}exact: sent 4194304 bytes sha256 [0-9a-f]{64}" "$out" | grep -oE '[0-9a-f]{64}$' || true)
	if [[ -n $sent ]] && grep -qE "^${p}exact: sent 4194304 bytes sha256 $sent; peer got 4194304 bytes sha256 $sent$" "$out" &&
		grep -qE "^${p}served exact: 4194304 bytes sha256 $sent$" "$out"; then
		echo "PASS $1"
		pass=$((pass + 1))
	else
		echo "FAIL $1 (the hashes differ, or no transfer)"
		fail=$((fail + 1))
	fi
}

# check_guests_clean ROLE...: every guest's report in $out says "oopses 0", and each
# powered off (GUEST_RC from guests_wait).
check_guests_clean() {
	local role
	if (($(grep -cE '^oopses 0$' "$out") == $#)); then
		echo "PASS no-oops-in-either-guest"
		pass=$((pass + 1))
	else
		echo "FAIL no-oops-in-either-guest (a guest's kernel log has an Oops, BUG or WARNING, or no report)"
		fail=$((fail + 1))
	fi
	for role in "$@"; do
		if [[ ${GUEST_RC[$role]:-1} == 0 ]]; then
			echo "PASS guest-$role-powered-off"
			pass=$((pass + 1))
		else
			echo "FAIL guest-$role-powered-off (run-guest.sh status ${GUEST_RC[$role]:-none})"
			fail=$((fail + 1))
		fi
	done
}
