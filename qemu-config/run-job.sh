#!/usr/bin/env bash
# Run a script in a fresh guest and exit with the script's exit code.
# Usage: run-job.sh SCRIPT|DIR [run-guest.sh options]
#   SCRIPT is copied to a temporary job directory as run.sh (a DIR is copied whole and
#   must hold run.sh; its other files are visible in the guest under /job). Prints the
#   job's output. Exits with the job's code, or non-zero with the console tail when the
#   guest never wrote one. Defaults: --timeout 600, console log in the job directory.
#   VRNIC_KEEP_JOB=1 keeps the job directory (its path is printed).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[[ $# -gt 0 && $1 != -h && $1 != --help ]] || { sed -n '2,8s/^# \{0,1\}//p' "$0"; exit 0; }
src=$1; shift
[[ -e $src ]] || die "no such job script: $src"
job=$(mktemp -d /tmp/vrnic-job.XXXXXX)
if [[ -n ${VRNIC_KEEP_JOB:-} ]]; then log "job directory: $job"; else at_exit "rm -rf '$job'"; fi
if [[ -d $src ]]; then cp -a "$src/." "$job/"; else cp "$src" "$job/run.sh"; fi
[[ -f $job/run.sh ]] || die "$src has no run.sh"
chmod +x "$job/run.sh"

console=$job/console.log prev=
for a in "$@"; do [[ $prev == --log ]] && console=$a; prev=$a; done
rc=0
"$QC_DIR/run-guest.sh" --timeout 600 --log "$job/console.log" "$@" --job "$job" || rc=$?

[[ -f $job/output.log ]] && cat "$job/output.log"
if [[ -f $job/exit_code ]]; then
  exit "$(<"$job/exit_code")"
fi
log "the guest wrote no exit code (QEMU status $rc); console tail ($console):"
tail -n 40 "$console" >&2 || true
exit $((rc ? rc : 1))
