#!/usr/bin/env bash
# Host tools the build and tests need (Debian). Idempotent and quiet when all are present.
set -euo pipefail
need=()
for tool in cc:gcc make:make cpio:cpio debootstrap:debootstrap shellcheck:shellcheck tshark:tshark \
	ping:iputils-ping ethtool:ethtool python3:python3; do
	command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool##*:}")
done
if ((${#need[@]})); then
	echo "installing: ${need[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
	echo "cargo not found: install the Rust toolchain (rustup) first" >&2
	exit 1
fi
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt clippy
