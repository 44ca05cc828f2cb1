//! Fault injection: deterministic, scriptable faults per device, for people testing drivers
//! (`vrnic ctl fault DEVICE RULE`, or a start-up file `vrnic serve --faults DEVICE=FILE`;
//! the syntax is in `rule`).
//!
//! A rule either acts at once (an async event, a stall of the data path) or waits for its
//! occurrence, counted from when it was armed: the Nth send WQE of a QP (or of any QP, or
//! of the K-th QP created), the Nth admin command of an opcode. Each fires once, is logged
//! (`fired`) and stays listed, with what it hit, until cleared.
//!
//! Layers: the plan (`Faults`, `plan`, `rule`, `view`) is plain state each device owns
//! (`Rnic::faults`), below `rnic`, and the hooks in the admin engine and the data path ask
//! it what to do. `act` applies rules to a device (events through the real paths:
//! `admin::fatal`, QP and CQ errors, the async EQ) and runs held admin commands; it sits
//! beside `admin` and is called by `control` and the poller.
//!
//! Locks: the plan's lock is a leaf (lock rule 2), taken for a few instructions, under a
//! device lock or none; no device lock is taken while it is held. A hook costs one relaxed
//! load while nothing is armed.
//!
//! Nothing a rule does can wedge the device: a delayed admin command is held as a
//! deadline, not a sleep (the engine stops before it, the poller runs it when due, no
//! lock is held meanwhile and other devices are not involved); delays and stalls are at
//! most `rule::MAX_DELAY`; a reset of the device drops a held command.

pub mod act;
pub mod plan;
pub mod rule;
pub mod view;

use crate::trace::{Body, Emitter, Kind};
use plan::{AdminAct, Firing, Plan};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;
use vrnic_hw::{AqCompletion, AqHeader, AqOpcode, AqStatus, WcStatus};

pub use rule::{Event, QpSel, Rule, RuleError};

/// What the hooks must look at (bits of `Faults::hot`).
const WQE: u32 = 1;
const ADMIN: u32 = 2;
const STALL: u32 = 4;
const PORT_DOWN: u32 = 8;

/// A device's fault plan, with the bits that let the hooks skip it while nothing is armed.
pub struct Faults {
    device: String,
    /// The device's tracer: every firing is also a `fault` event.
    trace: Emitter,
    hot: AtomicU32,
    plan: Mutex<Plan>,
}

/// A rule fired: the one place a firing is reported, in the log and as a `fault` trace
/// event.
pub fn fired(device: &str, trace: &Emitter, firing: &Firing) {
    log::info!(
        "{device}: fault {} `{}` fired: {}",
        firing.id,
        firing.rule,
        firing.what
    );
    trace.emit(Kind::Fault, None, || {
        Some(Body::Fault {
            id: firing.id,
            rule: firing.rule.to_string(),
            what: firing.what.clone(),
        })
    });
}

impl Faults {
    pub fn new(device: &str, trace: Emitter) -> Self {
        Faults {
            device: device.into(),
            trace,
            hot: AtomicU32::new(0),
            plan: Mutex::new(Plan::default()),
        }
    }

    fn hot(&self, bit: u32) -> bool {
        self.hot.load(Ordering::Relaxed) & bit != 0
    }

    /// The plan, locked (a leaf lock; see the module doc).
    pub fn lock(&self) -> PlanGuard<'_> {
        PlanGuard {
            faults: self,
            plan: self.plan.lock().unwrap_or_else(|p| p.into_inner()),
        }
    }

    /// Arms a rule that waits for its occurrence; its id.
    pub fn arm(&self, rule: Rule) -> Result<u32, plan::PlanError> {
        let id = self.lock().arm(rule)?;
        log::info!("{}: fault {id} armed: {rule}", self.device);
        Ok(id)
    }

    /// Hook (data path, under the device lock): the send WQE at `index` of QP `qpn` is at
    /// the head of its queue; `fresh` if it has not started yet. The status it fails with.
    pub fn wqe(&self, qpn: u32, index: u32, fresh: bool) -> Option<WcStatus> {
        if !fresh || !self.hot(WQE) {
            return None;
        }
        let (firing, status) = self.lock().wqe(qpn, index, Instant::now())?;
        fired(&self.device, &self.trace, &firing);
        Some(status)
    }

    /// Hook (admin engine, no lock held): a doorbell to producer index `pi`. True if the
    /// engine is held by a delay (or its release runs on another thread): return at once.
    pub fn admin_gate(&self, pi: u32) -> bool {
        self.hot(ADMIN) && self.lock().admin_gate(pi)
    }

    /// Hook (admin engine, no lock held): the command `cmd` at queue index `index` is next.
    /// `Hold`: stop before it; `Fail`: publish that completion instead of executing it.
    pub fn admin_command(&self, index: u32, cmd: &[u8], pi: u32) -> Option<AdminAct> {
        if !self.hot(ADMIN) {
            return None;
        }
        let opcode = *cmd.get(AqHeader::OPCODE_OFF)?;
        let id = cmd.get(AqHeader::CMD_ID_OFF..AqHeader::CMD_ID_OFF + 4)?;
        let cmd_id = u32::from_le_bytes(id.try_into().ok()?);
        let (firing, act) = self
            .lock()
            .admin_command(index, opcode, cmd_id, pi, Instant::now())?;
        fired(&self.device, &self.trace, &firing);
        Some(act)
    }

    /// Hook (admin engine): a command completed; a CREATE_QP that succeeded is counted by
    /// `qp=new:K` rules.
    pub fn admin_done(&self, completion: &AqCompletion) {
        if self.hot(WQE)
            && completion.opcode == u8::from(AqOpcode::CreateQp)
            && completion.status == u8::from(AqStatus::Success)
        {
            self.lock().qp_created(completion.result0.to_native());
        }
    }

    /// Hook (data path, at the start of a pass, under the device lock): the instant a
    /// stall ends.
    pub fn stalled(&self, now: Instant) -> Option<Instant> {
        if !self.hot(STALL) {
            return None;
        }
        self.lock().stalled(now)
    }

    /// Hook (QUERY_PORT): a rule took the port down.
    pub fn port_down(&self) -> bool {
        self.hot(PORT_DOWN)
    }

    /// Hook (device reset, under the device lock): the admin queue is gone, and a command
    /// held from it with it.
    pub fn device_reset(&self) {
        if !self.hot(ADMIN) {
            return;
        }
        if let Some(h) = self.lock().device_reset() {
            log::info!(
                "{}: the admin command held at queue index {} is dropped: the device was reset",
                self.device,
                h.index
            );
        }
    }
}

/// The plan, locked; the hooks' bits are brought up to date when it is released.
pub struct PlanGuard<'a> {
    faults: &'a Faults,
    plan: MutexGuard<'a, Plan>,
}

impl std::ops::Deref for PlanGuard<'_> {
    type Target = Plan;
    fn deref(&self) -> &Plan {
        &self.plan
    }
}

impl std::ops::DerefMut for PlanGuard<'_> {
    fn deref_mut(&mut self) -> &mut Plan {
        &mut self.plan
    }
}

impl Drop for PlanGuard<'_> {
    fn drop(&mut self) {
        let p = &self.plan;
        let bits = (p.has_wqe_rules() as u32 * WQE)
            | (p.has_admin_rules() as u32 * ADMIN)
            | (p.stall_until.is_some() as u32 * STALL)
            | (p.port_down as u32 * PORT_DOWN);
        self.faults.hot.store(bits, Ordering::Relaxed);
    }
}
