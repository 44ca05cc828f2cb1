//! `FakeDriver`: the guest's kernel driver (and, for the data path, its user processes) for
//! one device: vfio-user set-up as QEMU does it, bring-up (SPEC "Bring-up"), registers, the
//! admin queue (SPEC "Admin queue"), doorbells and kicks (SPEC "Posting work") and MSI-X.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use vm_memory::{ByteValued, Bytes, FileOffset, MmapRegion, VolatileMemory};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use vrnic_hw::{
    bar0, db_flag_offset, db_page, db_slot_offset, kick_page, AqCompletion, AqStatus,
    ACQ_ENTRY_SIZE, AQ_ENTRY_SIZE, BAR_CTRL, BAR_CTRL_SIZE, BAR_DB, BAR_DB_SIZE, BAR_KICK,
    BAR_KICK_SIZE, DB_PAGE_SIZE, MSIX_VECTORS, VERSION_MAJOR,
};

use super::memory::{GuestMemory, RAM_BASE, RAM_SIZE};
use super::queues::Eq;
use super::vfio::{
    VfioClient, DEVICE_FLAGS_PCI, DEVICE_FLAGS_RESET, DMA_READ, DMA_WRITE, IRQ_MSIX,
    REGION_FLAG_MMAP,
};
use super::{wait_for, TIMEOUT};

/// Admin queue depth used by `bring_up` (small, so tests wrap it often).
pub const ADMIN_DEPTH_LOG2: u32 = 3;

/// The outcome of one admin command, as its completion reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdminResult {
    pub opcode: u8,
    pub status: u8,
    pub err_offset: u16,
    pub results: [u32; 4],
}

impl AdminResult {
    pub fn status(&self) -> Result<AqStatus, u8> {
        AqStatus::try_from(self.status)
    }

    /// The results of a command that must have succeeded.
    #[track_caller]
    pub fn ok(&self) -> [u32; 4] {
        assert_eq!(
            self.status(),
            Ok(AqStatus::Success),
            "admin command {:#x} failed (err_offset {})",
            self.opcode,
            self.err_offset
        );
        assert_eq!(
            u32::from(self.err_offset),
            vrnic_hw::AQ_ERR_OFFSET_NONE,
            "a successful command names no field"
        );
        self.results
    }

    /// The command must have failed with `status` naming the field at `err_offset`.
    #[track_caller]
    pub fn expect_err(&self, status: AqStatus, err_offset: usize) {
        assert_eq!(
            (self.status(), usize::from(self.err_offset)),
            (Ok(status), err_offset),
            "admin command {:#x}: (status, err_offset)",
            self.opcode
        );
    }

    /// The command must have failed with `status` and no single field at fault.
    #[track_caller]
    pub fn expect_general_err(&self, status: AqStatus) {
        self.expect_err(status, vrnic_hw::AQ_ERR_OFFSET_NONE as usize);
    }
}

/// The admin queue pair in guest memory.
struct AdminQueue {
    aq: u64,
    acq: u64,
    depth_log2: u32,
    /// Commands written (free-running).
    pi: u32,
    /// Completions consumed (free-running).
    ci: u32,
    next_id: u32,
}

/// One guest's driver for one device.
pub struct FakeDriver {
    pub vfio: VfioClient,
    pub mem: GuestMemory,
    /// The device's LID (as configured when it was started; 0 in RoCE mode).
    pub lid: u16,
    /// RoCE mode, after `roce_up`: the port's MAC and GID 0.
    pub mac: Option<[u8; 6]>,
    pub gid0: Option<[u8; 16]>,
    /// BAR2, the doorbell pages, mmapped from the fd the device sent.
    db: MmapRegion,
    /// One eventfd per MSI-X vector.
    irqs: Vec<EventFd>,
    admin: Option<AdminQueue>,
    /// The async EQ (vector 0) and the completion EQ (vector 1) made by `bring_up`.
    pub async_eq: Option<Eq>,
    pub comp_eq: Option<Eq>,
    /// Next MR iova (each MR gets its own GiB of iova space).
    pub(super) next_iova: u64,
    /// Doorbells rung and kicks written (the doorbell protocol's trapped writes).
    pub doorbells: u64,
    pub kicks: u64,
}

impl FakeDriver {
    /// Connects as QEMU does: VERSION, DMA_MAP of guest RAM, DEVICE_GET_INFO, region infos
    /// (mmapping BAR2 with the fd received), MSI-X eventfds for every vector.
    pub fn connect(socket: &Path, lid: u16) -> Self {
        Self::connect_with_ram(socket, lid, RAM_SIZE)
    }

    pub fn connect_with_ram(socket: &Path, lid: u16, ram_size: u64) -> Self {
        let mut vfio = VfioClient::connect(socket);
        vfio.version();
        let mem = GuestMemory::new(ram_size);
        vfio.dma_map(
            RAM_BASE,
            ram_size,
            0,
            DMA_READ | DMA_WRITE,
            Some(mem.ram_fd()),
        )
        .expect("DMA_MAP of guest RAM");
        let info = vfio.device_info();
        assert_eq!(
            info.flags & (DEVICE_FLAGS_PCI | DEVICE_FLAGS_RESET),
            DEVICE_FLAGS_PCI | DEVICE_FLAGS_RESET
        );
        assert!(info.num_regions >= 9 && info.num_irqs == 3, "{info:?}");
        let bar0 = vfio.region_info(BAR_CTRL);
        assert_eq!(bar0.size, u64::from(BAR_CTRL_SIZE));
        let kick = vfio.region_info(BAR_KICK);
        assert_eq!(kick.size, u64::from(BAR_KICK_SIZE));
        let bar2 = vfio.region_info(BAR_DB);
        assert_eq!(bar2.size, u64::from(BAR_DB_SIZE));
        assert!(bar2.flags & REGION_FLAG_MMAP != 0, "BAR2 must be mmap-able");
        assert_eq!(bar2.areas, vec![(0, u64::from(BAR_DB_SIZE))]);
        let fd = bar2.fd.expect("BAR2 info carries the fd");
        let db = MmapRegion::from_file(FileOffset::new(fd, bar2.offset), BAR_DB_SIZE as usize)
            .expect("mmap BAR2");
        let irqs: Vec<EventFd> = (0..MSIX_VECTORS)
            .map(|_| EventFd::new(EFD_NONBLOCK).expect("eventfd"))
            .collect();
        let fds: Vec<_> = irqs.iter().map(|e| e.as_raw_fd()).collect();
        vfio.set_irqs(IRQ_MSIX, 0, &fds).expect("SET_IRQS MSI-X");
        FakeDriver {
            vfio,
            mem,
            lid,
            mac: None,
            gid0: None,
            db,
            irqs,
            admin: None,
            async_eq: None,
            comp_eq: None,
            next_iova: 0x7f00_0000_0000,
            doorbells: 0,
            kicks: 0,
        }
    }

    /// Bring-up: checks the version, starts the admin queue, creates the async EQ
    /// (vector 0) and a completion EQ (vector 1).
    pub fn bring_up(&mut self) {
        self.enable(ADMIN_DEPTH_LOG2);
        let async_eq = self.create_eq(6, true, 0);
        self.async_eq = Some(async_eq);
        let comp_eq = self.create_eq(10, false, 1);
        self.comp_eq = Some(comp_eq);
    }

    /// Steps 1-4 of SPEC "Bring-up" with an admin queue of 2^depth_log2 entries.
    pub fn enable(&mut self, depth_log2: u32) {
        let version = self.read_reg(bar0::VERSION);
        assert_eq!(
            (version & bar0::VERSION_MAJOR_MASK) >> bar0::VERSION_MAJOR_SHIFT,
            VERSION_MAJOR
        );
        let depth = 1u64 << depth_log2;
        let aq = self.mem.alloc(depth * u64::from(AQ_ENTRY_SIZE), 4096);
        let acq = self.mem.alloc(depth * u64::from(ACQ_ENTRY_SIZE), 4096);
        self.write_reg(bar0::AQ_BASE_LO, aq as u32);
        self.write_reg(bar0::AQ_BASE_HI, (aq >> 32) as u32);
        self.write_reg(bar0::ACQ_BASE_LO, acq as u32);
        self.write_reg(bar0::ACQ_BASE_HI, (acq >> 32) as u32);
        self.write_reg(bar0::AQ_DEPTH_LOG2, depth_log2);
        self.write_reg(bar0::DEV_CTRL, bar0::DEV_CTRL_ENABLE_MASK);
        let deadline = Instant::now() + TIMEOUT;
        while self.read_reg(bar0::DEV_STATUS) & bar0::DEV_STATUS_READY_MASK == 0 {
            assert!(Instant::now() < deadline, "device never became READY");
            assert_eq!(
                self.read_reg(bar0::DEV_STATUS) & bar0::DEV_STATUS_FATAL_MASK,
                0,
                "device FATAL during bring-up (code {})",
                self.read_reg(bar0::FATAL_CODE)
            );
        }
        self.admin = Some(AdminQueue {
            aq,
            acq,
            depth_log2,
            pi: 0,
            ci: 0,
            next_id: 1,
        });
    }

    /// Forgets the admin queue and EQs (after a reset, before a new bring-up).
    pub fn forget_device_state(&mut self) {
        self.admin = None;
        self.async_eq = None;
        self.comp_eq = None;
    }

    /// DEV_CTRL.RESET, then the driver forgets its device state.
    pub fn reset_device(&mut self) {
        self.write_reg(bar0::DEV_CTRL, bar0::DEV_CTRL_RESET_MASK);
        self.forget_device_state();
    }

    // ------------------------------------------------------------------ registers

    /// A 32-bit BAR0 read (a trapped REGION_READ).
    pub fn read_reg(&mut self, offset: u64) -> u32 {
        let b = self
            .vfio
            .region_read(BAR_CTRL, offset, 4)
            .unwrap_or_else(|e| panic!("BAR0 read {offset:#x}: errno {e}"));
        u32::from_le_bytes(b.try_into().expect("4 bytes"))
    }

    /// A 32-bit BAR0 write, posted as QEMU posts MMIO writes.
    pub fn write_reg(&mut self, offset: u64, value: u32) {
        self.vfio
            .region_write_posted(BAR_CTRL, offset, &value.to_le_bytes());
    }

    // ------------------------------------------------------------------ admin queue

    pub fn is_enabled(&self) -> bool {
        self.admin.is_some()
    }

    /// The admin queue's producer index (commands written) and depth.
    pub fn admin_pi_and_depth(&self) -> (u32, u32) {
        let q = self.admin.as_ref().expect("the device is not enabled");
        (q.pi, 1 << q.depth_log2)
    }

    /// Submits one 128-byte command (its cmd_id is filled in) and waits for its completion.
    pub fn admin_bytes(&mut self, cmd: &[u8]) -> AdminResult {
        self.admin_batch(&[cmd]).remove(0)
    }

    /// Writes `cmd` into the admin queue and rings AQ_DOORBELL, without waiting for a
    /// completion (for tests in which the device cannot complete it).
    pub fn admin_submit_only(&mut self, cmd: &[u8]) {
        let q = self.admin.as_mut().expect("the device is not enabled");
        let slot = u64::from(q.pi & ((1u32 << q.depth_log2) - 1));
        self.mem.write(q.aq + slot * u64::from(AQ_ENTRY_SIZE), cmd);
        q.pi = q.pi.wrapping_add(1);
        let pi = q.pi;
        self.write_reg(bar0::AQ_DOORBELL, pi);
    }

    /// Whether the completion of the oldest command not collected yet is there.
    pub fn admin_completion_ready(&self) -> bool {
        let q = self.admin.as_ref().expect("the device is not enabled");
        let slot = u64::from(q.ci & ((1u32 << q.depth_log2) - 1));
        let addr = q.acq + slot * u64::from(ACQ_ENTRY_SIZE);
        let phase = ((q.ci >> q.depth_log2) & 1) ^ 1;
        let owner: u8 = self
            .mem
            .load(addr + AqCompletion::OWNER_OFF as u64, Ordering::Acquire);
        u32::from(owner & 1) == phase
    }

    /// Waits for the completions of `n` commands sent with `admin_submit_only`, in order.
    pub fn admin_collect(&mut self, n: usize) -> Vec<AdminResult> {
        (0..n)
            .map(|_| {
                wait_for("an admin completion", || {
                    self.admin_completion_ready().then_some(())
                });
                let q = self.admin.as_mut().expect("enabled");
                let slot = u64::from(q.ci & ((1u32 << q.depth_log2) - 1));
                let c: AqCompletion = self.mem.read_obj(q.acq + slot * u64::from(ACQ_ENTRY_SIZE));
                q.ci = q.ci.wrapping_add(1);
                AdminResult {
                    opcode: c.opcode,
                    status: c.status,
                    err_offset: c.err_offset.to_native(),
                    results: [
                        c.result0.to_native(),
                        c.result1.to_native(),
                        c.result2.to_native(),
                        c.result3.to_native(),
                    ],
                }
            })
            .collect()
    }

    /// Submits `cmd` with command id `id` and returns its completion as the device wrote
    /// it, checking nothing (for tests of a device that writes malformed ones).
    pub fn admin_raw(&mut self, cmd: &[u8], id: u32) -> AqCompletion {
        let mut bytes = cmd.to_vec();
        bytes[4..8].copy_from_slice(&id.to_le_bytes());
        self.admin_submit_only(&bytes);
        let q = self.admin.as_mut().expect("enabled");
        let depth = 1u32 << q.depth_log2;
        let addr = q.acq + u64::from(q.ci & (depth - 1)) * u64::from(ACQ_ENTRY_SIZE);
        let phase = ((q.ci >> q.depth_log2) & 1) ^ 1;
        q.ci = q.ci.wrapping_add(1);
        let mem = &self.mem;
        wait_for("an admin completion", || {
            let owner: u8 = mem.load(addr + AqCompletion::OWNER_OFF as u64, Ordering::Acquire);
            (u32::from(owner & 1) == phase).then_some(())
        });
        self.mem.read_obj(addr)
    }

    /// Submits a command struct (any `Cmd*`: they all start with `aq_header`).
    pub fn admin<T: ByteValued>(&mut self, cmd: &T) -> AdminResult {
        self.admin_bytes(cmd.as_slice())
    }

    /// Writes `cmds` into the admin queue, rings AQ_DOORBELL once and collects their
    /// completions in order (SPEC "Submitting", "Completing").
    pub fn admin_batch(&mut self, cmds: &[&[u8]]) -> Vec<AdminResult> {
        let q = self.admin.as_mut().expect("the device is not enabled");
        let depth = 1u32 << q.depth_log2;
        assert!(
            cmds.len() <= depth as usize,
            "more commands than the queue holds"
        );
        let mut ids = Vec::new();
        for cmd in cmds {
            assert_eq!(
                cmd.len(),
                AQ_ENTRY_SIZE as usize,
                "admin commands are 128 bytes"
            );
            let mut bytes = cmd.to_vec();
            let id = q.next_id;
            q.next_id = q.next_id.wrapping_add(1);
            bytes[4..8].copy_from_slice(&id.to_le_bytes());
            let slot = u64::from(q.pi & (depth - 1));
            self.mem
                .write(q.aq + slot * u64::from(AQ_ENTRY_SIZE), &bytes);
            q.pi = q.pi.wrapping_add(1);
            ids.push((id, bytes[0]));
        }
        let pi = q.pi;
        self.write_reg(bar0::AQ_DOORBELL, pi);
        let mut results = Vec::new();
        for (id, opcode) in ids {
            let q = self.admin.as_mut().expect("enabled");
            let slot = u64::from(q.ci & (depth - 1));
            let addr = q.acq + slot * u64::from(ACQ_ENTRY_SIZE);
            let phase = ((q.ci >> q.depth_log2) & 1) ^ 1;
            let mem = &self.mem;
            wait_for("an admin completion", || {
                let owner: u8 = mem.load(addr + AqCompletion::OWNER_OFF as u64, Ordering::Acquire);
                (u32::from(owner & 1) == phase).then_some(())
            });
            let c: AqCompletion = self.mem.read_obj(addr);
            q.ci = q.ci.wrapping_add(1);
            assert_eq!(c.cmd_id.to_native(), id, "completion for another command");
            assert_eq!(c.opcode, opcode, "completion echoes the opcode");
            assert_eq!(c.reserved0, [0; 7], "completion reserved bytes");
            results.push(AdminResult {
                opcode: c.opcode,
                status: c.status,
                err_offset: c.err_offset.to_native(),
                results: [
                    c.result0.to_native(),
                    c.result1.to_native(),
                    c.result2.to_native(),
                    c.result3.to_native(),
                ],
            });
        }
        results
    }

    // ------------------------------------------------------------------ doorbells

    fn db_offset(page: u32, slot: u32, word: u32) -> usize {
        (u64::from(page) * u64::from(DB_PAGE_SIZE) + db_slot_offset(slot) + u64::from(word) * 4)
            as usize
    }

    /// Reads word `word` of doorbell slot `slot` of page `page` (BAR2, no message).
    pub fn db_load(&self, page: u32, slot: u32, word: u32) -> u32 {
        self.db
            .as_volatile_slice()
            .load(Self::db_offset(page, slot, word), Ordering::Acquire)
            .expect("BAR2 load")
    }

    /// Stores word `word` of doorbell slot `slot` of page `page` with release ordering.
    pub fn db_store(&self, page: u32, slot: u32, word: u32, value: u32) {
        self.db
            .as_volatile_slice()
            .store(value, Self::db_offset(page, slot, word), Ordering::Release)
            .expect("BAR2 store");
    }

    /// Reads any 32-bit word of BAR2.
    pub fn db_word(&self, offset: u64) -> u32 {
        self.db
            .as_volatile_slice()
            .load(offset as usize, Ordering::Acquire)
            .expect("BAR2 load")
    }

    /// POLL_STATE of doorbell page `page`.
    pub fn poll_state(&self, page: u32) -> u32 {
        self.db_word(u64::from(page) * u64::from(DB_PAGE_SIZE) + db_page::POLL_STATE)
    }

    /// Waits until the poller announces sleep in doorbell page `page` (POLLING clear in its
    /// POLL_STATE) and stays asleep: a wake-up still pending from earlier work may make it
    /// poll once more, then it looks again.
    pub fn wait_poller_asleep(&self, page: u32) {
        let asleep = || self.poll_state(page) & db_page::POLL_STATE_POLLING_MASK == 0;
        loop {
            wait_for("the poller to go to sleep", || asleep().then_some(()));
            std::thread::sleep(Duration::from_millis(20));
            if asleep() {
                break;
            }
        }
    }

    /// Sets the flag byte of slot `slot` of page `page` (BAR2, no message).
    pub fn set_slot_flag(&self, page: u32, slot: u32) {
        let off = u64::from(page) * u64::from(DB_PAGE_SIZE) + db_flag_offset(slot);
        self.db
            .as_volatile_slice()
            .store(1u8, off as usize, Ordering::Release)
            .expect("BAR2 store");
    }

    /// Stores 1 into PAGE_FLAG of page `page`.
    pub fn set_page_flag(&self, page: u32) {
        let off = u64::from(page) * u64::from(DB_PAGE_SIZE) + db_page::PAGE_FLAG;
        self.db
            .as_volatile_slice()
            .store(1u32, off as usize, Ordering::Release)
            .expect("BAR2 store");
    }

    /// SPEC "Posting work" steps 2-3 for a QP doorbell: release barrier, (a) store the
    /// producer index, (b) the slot's flag, (c) PAGE_FLAG, (d) full barrier, (e) read
    /// POLL_STATE and KICK that page only when the device may be asleep.
    pub fn ring_doorbell(&mut self, page: u32, slot: u32, word: u32, value: u32) {
        fence(Ordering::Release);
        self.db_store(page, slot, word, value);
        self.set_slot_flag(page, slot);
        self.set_page_flag(page);
        fence(Ordering::SeqCst);
        self.doorbells += 1;
        if self.poll_state(page) & db_page::POLL_STATE_POLLING_MASK == 0 {
            self.kick(page);
        }
    }

    /// Writes KICK of page `page` (BAR4; a posted, trapped write).
    pub fn kick(&mut self, page: u32) {
        self.kicks += 1;
        let offset = u64::from(page) * u64::from(DB_PAGE_SIZE) + kick_page::KICK;
        self.vfio
            .region_write_posted(BAR_KICK, offset, &1u32.to_le_bytes());
    }

    // ------------------------------------------------------------------ interrupts

    /// Interrupts signalled on `vector` since the last look (0 if none); never blocks.
    pub fn take_irqs(&self, vector: u16) -> u64 {
        self.irqs[usize::from(vector)].read().unwrap_or(0)
    }

    /// Waits for at least one interrupt on `vector`; returns how many were signalled.
    pub fn wait_irq(&self, vector: u16) -> u64 {
        let fd = &self.irqs[usize::from(vector)];
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(TIMEOUT.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: `pfd` is a valid pollfd for the duration of the call; the count is 1.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        assert!(
            n == 1,
            "no interrupt on MSI-X vector {vector} within {TIMEOUT:?}"
        );
        fd.read().expect("eventfd read")
    }

    // ------------------------------------------------------------------ DMA maps

    /// Adds guest memory at `gpa` that the device may only read (DMA_MAP READ). The test
    /// itself can still write it through `mem`.
    pub fn map_read_only_range(&mut self, gpa: u64, size: u64) {
        self.map_extra_range(gpa, size, DMA_READ);
    }

    /// Adds guest memory at `gpa` backed by a new memfd, DMA-mapped with `flags`.
    pub fn map_extra_range(&mut self, gpa: u64, size: u64, flags: u32) {
        let file = self.mem.add_range(gpa, size);
        self.vfio
            .dma_map(gpa, size, 0, flags, Some(file.as_raw_fd()))
            .expect("DMA_MAP of an extra range");
    }

    /// DMA_UNMAP of a range mapped earlier (the test keeps its own mapping).
    pub fn unmap_range(&mut self, gpa: u64, size: u64) {
        self.vfio.dma_unmap(gpa, size).expect("DMA_UNMAP");
    }

    /// Declares guest memory at `gpa` without an fd (like QEMU's ROM maps): the device
    /// cannot reach it.
    pub fn map_fdless_range(&mut self, gpa: u64, size: u64) {
        self.vfio
            .dma_map(gpa, size, 0, DMA_READ | DMA_WRITE, None)
            .expect("DMA_MAP without fd");
    }

    /// Ends the connection as QEMU does when it exits or crashes: the socket closes.
    pub fn disconnect(self) {
        drop(self);
    }
}
