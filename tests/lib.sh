# Shared by the end-to-end scripts: build everything the guests need, start vrnic, boot guests.
# shellcheck shell=bash
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${VRNIC_CACHE:-/var/cache/vrnic}
E2E_IMAGE=$CACHE/e2e.cpio

say() { printf '[e2e %s] %s\n' "$(date +%T)" "$*" >&2; }

# Builds vrnic, the kernel module and the provider, and packs them into $E2E_IMAGE.
build_all() {
	bash "$REPO/qemu-config/provision.sh" all
	say "building vrnic"
	(cd "$REPO" && cargo build --release -q -p vrnic)
	say "building vrnic.ko"
	bash "$REPO/guest-driver/kernel/build.sh" >/dev/null
	say "building the rdma-core provider"
	local out=$CACHE/e2e-provider
	bash "$REPO/guest-driver/provider/build.sh" "$out" >/dev/null
	bash "$REPO/qemu-config/pack-guest.sh" --output "$E2E_IMAGE" --overlay "$out" \
		--add "$REPO/guest-driver/kernel/vrnic.ko:/opt/vrnic/modules/"
}

# start_vrnic DIR SPEC...: serves one device per SPEC (NAME,lid=N) on DIR/NAME.sock.
start_vrnic() {
	local dir=$1 args=() spec
	shift
	for spec in "$@"; do
		args+=(--device "${spec%%,*},socket=$dir/${spec%%,*}.sock,${spec#*,}")
	done
	# shellcheck disable=SC2086 # VRNIC_SERVE_ARGS: extra options, e.g. --poll-idle-us 0
	RUST_LOG=${RUST_LOG:-info} "$REPO/target/release/vrnic" serve "${args[@]}" ${VRNIC_SERVE_ARGS:-} >"$dir/vrnic.log" 2>&1 &
	VRNIC_PID=$!
	for spec in "$@"; do
		local n=0
		until [[ -S $dir/${spec%%,*}.sock ]]; do
			((n++ < 100)) || { cat "$dir/vrnic.log" >&2; return 1; }
			sleep 0.1
		done
	done
}

stop_vrnic() {
	[[ -n ${VRNIC_PID:-} ]] || return 0
	kill "$VRNIC_PID" 2>/dev/null || true
	wait "$VRNIC_PID" 2>/dev/null || true
	VRNIC_PID=
}
