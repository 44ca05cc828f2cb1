# NVMe over Fabrics over RDMA, a check of tests/e2e.sh (sourced by it): guest B's nvmet-rdma
# exports a memory-backed null_blk namespace on its RoCE address, guest A's nvme-rdma
# connects through rdma_cm, runs fio with crc32c verification (4 KiB random read/write;
# 128 KiB sequential write, then a read that verifies it) and disconnects. Kprobes show
# that the data went through fast-registration MRs (the host's map_mr_sg calls and REG_MR
# work requests), that the target answered with SEND_WITH_INV, and that both sides drained
# their QPs (ib_drain_qp). Neither guest's kernel log may show a warning from vrnic, nvme
# or rdma, nor any WARNING/BUG/Oops. tests/guest/nvmeof.sh does the guests' part.
# shellcheck shell=bash disable=SC2016,SC2034 # NVMEOF_TESTS is for e2e.sh; $MYIP, $PEER, $PORT expand in the guest

fio_row() { echo "^ +$1: IOPS=[0-9.]+k?, BW=[0-9.]+[KMG]i?B/s"; }

nvmeof_host_checks="^namespace /dev/nvme[0-9]+n[0-9]+: 2097152 sectors;;$(fio_row read);;$(fio_row write)"
nvmeof_host_checks+=";;^== fio seqread-128k;;!:FAIL:;;!:verify: bad;;^ib_drain_qp calls [1-9];;^vrnic_map_mr_sg calls [1-9][0-9]{3}"
nvmeof_host_checks+=";;^first WRs posted: REG_MR [1-9][0-9]{3} "
nvmeof_host_checks+=";;^dmesg-problems 0\$"
nvmeof_target_checks="s:^host gone;;s:^first WRs posted: .* SEND_WITH_INV [1-9];;s:^ib_drain_qp calls [1-9];;s!:FAIL:;;s:^dmesg-problems 0\$"
NVMEOF_TESTS=(
	"roce-nvmeof|pair|$nvmeof_host_checks;;$nvmeof_target_checks;;s:use_srq=N|sh /job/nvmeof.sh target \$MYIP \$PORT|sh /job/nvmeof.sh host \$PEER \$PORT"
)
# nvmet-rdma receiving through kernel SRQs (use_srq=1): once in 24 runs the target guest
# panicked a few seconds after the host connected (an open bug, see the README; neither
# this check nor the stress loop below has hit it again), so it runs only on request:
# VRNIC_E2E_NVMEOF_SRQ=1.
if [[ ${VRNIC_E2E_NVMEOF_SRQ:-0} == 1 ]]; then
	NVMEOF_TESTS+=(
		"roce-nvmeof-srq|pair|$nvmeof_host_checks;;$nvmeof_target_checks;;s:use_srq=Y|sh /job/nvmeof.sh target-srq \$MYIP \$PORT|sh /job/nvmeof.sh host \$PEER \$PORT"
	)
fi

# A stress loop, on request: VRNIC_E2E_NVMEOF_STRESS=N adds N checks roce-nvmeof-srq-stress-I
# in the same boot. In each, the target loads nvmet-rdma with use_srq=1 (and unloads it after,
# so every round reloads it) and the host connects with 5 I/O queues (2 default, 2 write,
# 1 polled: with the admin queue the target sees 6 QPs on its SRQs), runs fio at iodepth 64
# with verification, then a verifying write job during which it resets the controller, has
# the target drop it (the target deletes it, as on a keep-alive timeout; the host connects
# again) and resets it again (each time the target tears down every queue with I/O in
# flight and serves a new controller), and disconnects. `tests/e2e.sh --only roce-nvmeof-srq-stress` runs the loop alone.
nvmeof_stress_checks="$nvmeof_host_checks;;^== fio randwrite-4k-resets;;^controller resets during I/O: 2, drops by the target: 1\$"
nvmeof_stress_checks+=";;$nvmeof_target_checks;;s:use_srq=Y;;s:^host gone; most connected queues at once: 6\$"
nvmeof_stress_checks+=";;s:^controller dropped\$;;s:^controllers created: 4\$"
for ((i = 1; i <= ${VRNIC_E2E_NVMEOF_STRESS:-0}; i++)); do
	NVMEOF_TESTS+=(
		"roce-nvmeof-srq-stress-$i|pair|$nvmeof_stress_checks|sh /job/nvmeof.sh target-srq-stress \$MYIP \$PORT|sh /job/nvmeof.sh host-stress \$PEER \$PORT"
	)
done

# nvmeof_job_files DIR...: puts the guests' part into their job directories.
nvmeof_job_files() {
	local d
	for d in "$@"; do cp "$REPO/tests/guest/nvmeof.sh" "$d/"; done
}
