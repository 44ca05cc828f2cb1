//! The device state layer: one vrnic device's identity (its link mode), registers,
//! doorbells, interrupt lines, DMA fence, object tables and GID table, and the
//! notifications (CQEs, EQEs) that change them. The admin engine and the data path (the
//! layer above) act on it; this layer knows neither.

pub mod contract;
pub mod doorbells;
pub mod fence;
pub mod gids;
pub mod irqs;
pub mod link;
pub mod lock_order;
pub mod notify;
pub mod regs;
pub mod snapshot;
pub mod waker;

use crate::guest_memory::{GuestRam, RamSnapshot};
use crate::objects::counters::{self, Counters};
use crate::objects::Objects;
use crate::pci::{ConfigSpace, PciIds};
use crate::ratelimit::WarnLimiter;
use crate::trace::Tracer;
use crate::wire::Tap;
use doorbells::DoorbellBar;
use fence::DmaFence;
use gids::{DeviceId, GidDirectory, GidTable, Gids};
use irqs::{IrqLines, PendingIrqs};
use link::LinkMode;
use regs::Registers;
use std::sync::{Arc, Mutex, MutexGuard};
use vrnic_hw::{bar0, FatalCode, MSIX_TABLE_OFF};
use waker::Waker;

/// What a device is, as configured on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RnicConfig {
    pub name: String,
    pub socket: std::path::PathBuf,
    pub link: LinkMode,
    pub ids: PciIds,
    /// `trace=PATH`: every event of the device, from start-up, into this file.
    pub trace: Option<std::path::PathBuf>,
    /// Capture the device's packets into this pcap file from the start (`pcap=PATH`).
    pub pcap: Option<std::path::PathBuf>,
    /// What the device does about contract violations (SPEC "Contract checking").
    pub contract: contract::ContractMode,
    /// `hostile=`: the hostile-device mode from the start (`crate::hostile`).
    pub hostile: Option<crate::hostile::Settings>,
}

impl RnicConfig {
    /// A device with the hw-spec's PCI IDs and no start-up trace, capture or hostile
    /// mode, checking the contract in the default mode (warn).
    pub fn new(name: &str, socket: std::path::PathBuf, link: LinkMode) -> Self {
        RnicConfig {
            name: name.into(),
            socket,
            link,
            ids: PciIds::default(),
            trace: None,
            pcap: None,
            contract: Default::default(),
            hostile: None,
        }
    }
}

/// The admin queue pair latched at ENABLE.
#[derive(Debug)]
pub struct AdminQueue {
    pub aq: u64,
    pub acq: u64,
    pub depth_log2: u32,
    /// Commands consumed (free-running).
    pub ci: u32,
}

impl AdminQueue {
    pub fn depth(&self) -> u32 {
        1 << self.depth_log2
    }

    /// Phase the device writes into the completion of free-running `index`.
    pub fn phase(&self, index: u32) -> u8 {
        (((index >> self.depth_log2) & 1) ^ 1) as u8
    }
}

pub struct Rnic {
    pub config: RnicConfig,
    /// Node GUID (from the link mode's identity, so it is stable across runs).
    pub node_guid: u64,
    pub doorbells: DoorbellBar,
    pub irq_lines: IrqLines,
    pub fence: Arc<DmaFence>,
    /// The device's index in its fabric, and the fabric's GID directory.
    pub id: DeviceId,
    gid_directory: Arc<GidDirectory>,
    /// The port's counters (SPEC "Counters"): every QP's traffic, and the port-only
    /// counts (dropped datagrams, CQ and EQ overflows). Outside the device lock: the data
    /// path adds to them without it.
    pub counters: Counters,
    /// Decoded events for subscribers (`vrnic ctl trace`, `trace=PATH`).
    pub trace: Tracer,
    /// The packet tap (`pcap=PATH`, `vrnic ctl pcap`): what its transfers put on a wire.
    pub tap: Tap,
    /// The contract checker: its mode and per-rule counts (outside the device lock).
    pub contract: contract::Contract,
    /// Fault injection (`faults`): rules armed through the control socket.
    pub faults: crate::faults::Faults,
    /// The hostile-device mode (off unless the spec or the control socket says so).
    pub hostile: crate::hostile::Hostile,
    waker: Arc<Waker>,
    state: Mutex<RnicState>,
}

/// Everything that changes, behind the device lock: the control path (vfio-user thread)
/// and the data path (pollers) both take it, one device lock at a time (see `lock_order`).
pub struct RnicState {
    /// Guest memory of the connected VMM, if any.
    pub ram: Option<GuestRam>,
    pub config_space: ConfigSpace,
    pub regs: Registers,
    pub admin: Option<AdminQueue>,
    pub objects: Objects,
    /// RoCE mode: the GID table (SET_GID), also published in the fabric's directory.
    pub gid_table: GidTable,
    /// Interrupts raised under the lock, signalled when it is released.
    pub pending_irqs: PendingIrqs,
    /// Where the data path's next pass over the QPs starts (fairness between QPs).
    pub poll_cursor: usize,
    warn_limit: WarnLimiter,
}

impl RnicState {
    pub fn new(ids: PciIds) -> Self {
        RnicState {
            ram: None,
            config_space: ConfigSpace::new(ids),
            regs: Registers::default(),
            admin: None,
            objects: Objects::new(),
            gid_table: GidTable::default(),
            pending_irqs: PendingIrqs::default(),
            poll_cursor: 0,
            warn_limit: WarnLimiter::default(),
        }
    }

    /// A snapshot of guest memory, or None without a VMM.
    pub fn mem(&self) -> Option<RamSnapshot> {
        self.ram.as_ref().map(GuestRam::snapshot)
    }

    /// The device is enabled, not failed, and has guest memory: it executes work and
    /// answers requests. A FATAL device does neither.
    pub fn serving(&self) -> bool {
        self.admin.is_some() && self.ram.is_some()
    }

    /// A warning the guest caused, rate-limited per device.
    pub fn warn(&mut self, rnic: &Rnic, what: std::fmt::Arguments<'_>) {
        self.log(rnic, log::Level::Warn, what);
    }

    /// A log line the guest can cause at will (rate-limited per device).
    pub fn log(&mut self, rnic: &Rnic, level: log::Level, what: std::fmt::Arguments<'_>) {
        if self.warn_limit.allow(rnic.name()) {
            log::log!(level, "{}: {what}", rnic.name());
        }
    }
}

/// The device lock, held. Interrupts raised while it was held are signalled after it is
/// released, so delivery never runs under (or waits for) a device lock.
pub struct StateGuard<'a> {
    rnic: &'a Rnic,
    guard: Option<MutexGuard<'a, RnicState>>,
}

impl std::ops::Deref for StateGuard<'_> {
    type Target = RnicState;
    fn deref(&self) -> &RnicState {
        match &self.guard {
            Some(g) => g,
            None => unreachable!("the guard is only empty while it drops"),
        }
    }
}

impl std::ops::DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut RnicState {
        match &mut self.guard {
            Some(g) => g,
            None => unreachable!("the guard is only empty while it drops"),
        }
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        let pending = self
            .guard
            .as_mut()
            .map(|g| g.pending_irqs.take())
            .unwrap_or_default();
        self.guard = None;
        lock_order::after_device_unlock();
        self.rnic.trace.irqs(pending.bits());
        self.rnic.irq_lines.signal(pending, self.rnic.name());
    }
}

impl Rnic {
    /// Device `id` of a fabric whose GIDs are published in `gid_directory`.
    pub fn new(
        config: RnicConfig,
        waker: Arc<Waker>,
        gid_directory: Arc<GidDirectory>,
        id: DeviceId,
    ) -> std::io::Result<Arc<Rnic>> {
        let state = RnicState::new(config.ids);
        let trace = Tracer::new(&config.name);
        if let Some(path) = &config.trace {
            trace.trace_to_file(path)?;
        }
        let emitter = trace.emitter();
        let tap = Tap::default();
        if let Some(path) = &config.pcap {
            tap.start(path, &config.name)
                .map_err(std::io::Error::other)?;
        }
        Ok(Arc::new(Rnic {
            trace,
            faults: crate::faults::Faults::new(&config.name, emitter.clone()),
            hostile: crate::hostile::Hostile::new(&config.name, emitter, config.hostile),
            node_guid: config.link.node_guid(),
            contract: contract::Contract::new(config.contract),
            config,
            doorbells: DoorbellBar::new()?,
            irq_lines: IrqLines::default(),
            fence: Arc::new(DmaFence::default()),
            id,
            gid_directory,
            counters: Counters::default(),
            tap,
            state: Mutex::new(state),
            waker,
        }))
    }

    /// Takes the device lock (rule: never while holding another device's).
    pub fn lock(&self) -> StateGuard<'_> {
        lock_order::before_device_lock();
        // A panic elsewhere must not take every later access down with it.
        let guard = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        StateGuard {
            rnic: self,
            guard: Some(guard),
        }
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The port LID (0 in RoCE mode).
    pub fn lid(&self) -> u16 {
        self.config.link.lid()
    }

    pub fn link(&self) -> &LinkMode {
        &self.config.link
    }

    /// The GID table with the directory it is published in (lock rule 2: the directory is
    /// a leaf, taken under the device lock `st` comes from).
    pub fn gids<'a>(&'a self, st: &'a mut RnicState) -> Gids<'a> {
        Gids {
            table: &mut st.gid_table,
            directory: &self.gid_directory,
            dev: self.id,
        }
    }

    /// Wakes the poller serving this device.
    pub fn wake(&self) {
        self.waker.wake();
    }

    pub fn waker(&self) -> &Arc<Waker> {
        &self.waker
    }

    /// The device cannot go on: FATAL (with `code` and `detail`) until reset. It stops
    /// executing work and answering requests (`RnicState::serving`).
    pub fn fatal(&self, st: &mut RnicState, code: FatalCode, detail: u32) {
        // The driver caused it (a bad admin queue, a broken rule): rate-limited.
        st.warn(
            self,
            format_args!("fatal device error {code:?}; a reset is needed"),
        );
        st.regs.dev_status = bar0::DEV_STATUS_FATAL_MASK;
        st.regs.fatal_code = u32::from(code);
        st.regs.fatal_detail = detail;
        self.trace.device_state("FATAL", Some(code));
        st.admin = None;
        notify::post_async(self, st, vrnic_hw::EventType::DeviceFatal, 0, 0);
    }

    /// Destroys every object and returns registers and doorbells to their reset values.
    /// Transfers still in flight finish into memory the driver has not reused yet: callers
    /// wait for the fence before they report the reset done (`fence.wait()`, unlocked).
    pub fn reset(&self, st: &mut RnicState) {
        log::debug!("{}: reset", self.name());
        self.trace.device_state("RESET", None);
        st.objects.reset();
        self.counters.clear();
        self.gids(st).clear();
        st.admin = None;
        self.faults.device_reset();
        st.regs = Registers::default();
        self.doorbells.clear_all();
    }

    /// A reset of the whole function (vfio DEVICE_RESET, or an FLR the guest initiated):
    /// the device reset plus config space. Interrupt routing stays: MSI-X is emulated by
    /// the VMM, which sets or clears the eventfds itself.
    pub fn reset_function(&self, st: &mut RnicState) {
        self.reset(st);
        st.config_space.reset();
    }

    /// The port's counters now, value i being counter i (each exact, not read at one
    /// instant).
    pub fn port_counters(&self) -> [u64; counters::COUNT] {
        self.counters.read()
    }

    /// The counters of QP `qpn`, or None if it does not exist (takes the device lock: not
    /// while holding one, see `lock_order`). Holding the lock, read `qp.counters` instead.
    pub fn qp_counters(&self, qpn: u32) -> Option<[u64; counters::COUNT]> {
        self.lock().objects.qp(qpn).map(|qp| qp.counters.read())
    }

    /// A trapped BAR0 read.
    pub fn bar0_read(&self, st: &RnicState, offset: u64, data: &mut [u8]) -> Result<(), i32> {
        if offset >= u64::from(MSIX_TABLE_OFF) {
            // MSI-X table (emulated by QEMU) and PBA: nothing pending to report.
            data.fill(0);
            return Ok(());
        }
        let value = st.regs.read(offset & !3, self.config.link.port_info());
        let shift = (offset & 3) * 8;
        let bytes = (value >> shift).to_le_bytes();
        let n = data.len().min(4 - (offset & 3) as usize);
        data[..n].copy_from_slice(&bytes[..n]);
        data[n..].fill(0);
        log::trace!("{}: BAR0 read {offset:#x} -> {value:#x}", self.name());
        Ok(())
    }
}

/// A device without socket or threads, for unit tests of the layers above.
#[cfg(test)]
pub mod testing {
    use super::{link::LinkMode, waker::Waker, Rnic, RnicConfig};
    use crate::guest_memory::{DmaMapRequest, GuestRam, RamSnapshot};
    use std::sync::Arc;

    /// Where the test device's guest RAM starts.
    pub const RAM_BASE: u64 = 0x10_0000;

    /// A device named "t" (LID 1) whose VMM connected `size` bytes of guest RAM at RAM_BASE.
    pub fn device_with_ram(size: u64) -> (Arc<Rnic>, RamSnapshot) {
        let config = RnicConfig::new(
            "t",
            "/nonexistent".into(),
            LinkMode::Ib { lid: 1, guid: None },
        );
        let rnic = Rnic::new(config, Arc::new(Waker::new().unwrap()), Arc::default(), 0).unwrap();
        let ram = GuestRam::new();
        let fd = crate::memfd::create(c"ram", size).unwrap();
        ram.map(DmaMapRequest {
            addr: RAM_BASE,
            size,
            file_offset: 0,
            readable: true,
            writable: true,
            fd: Some(fd),
        })
        .unwrap();
        let mem = ram.snapshot();
        rnic.lock().ram = Some(ram);
        (rnic, mem)
    }
}
