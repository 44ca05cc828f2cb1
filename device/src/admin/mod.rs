//! The admin queue engine: reads commands from the guest's admin queue, executes them in
//! order and publishes completions (SPEC "Admin queue").

mod commands;
pub mod error;
mod memory;
mod qp;
mod queues;

use crate::guest_memory::RamSnapshot;
use crate::objects::Uctx;
use crate::rnic::{Rnic, RnicState};
use std::sync::atomic::Ordering;
use vm_memory::ByteValued;
use vrnic_hw::{
    bar0, AqCompletion, AqStatus, FatalCode, ACQ_ENTRY_SIZE, AQ_DEPTH_LOG2_MAX, AQ_ENTRY_SIZE,
    KERNEL_UCTX,
};

/// The admin queue pair latched at ENABLE.
#[derive(Debug)]
pub struct AdminQueue {
    aq: u64,
    acq: u64,
    depth_log2: u32,
    /// Commands consumed (free-running).
    ci: u32,
}

impl AdminQueue {
    fn depth(&self) -> u32 {
        1 << self.depth_log2
    }
}

/// DEV_CTRL.ENABLE was set: latch the admin queue registers and start.
pub fn enable(rnic: &Rnic, st: &mut RnicState) {
    let r = &st.regs;
    let aq = u64::from(r.aq_base_hi) << 32 | u64::from(r.aq_base_lo);
    let acq = u64::from(r.acq_base_hi) << 32 | u64::from(r.acq_base_lo);
    let depth_log2 = r.aq_depth_log2;
    if aq == 0
        || acq == 0
        || aq % 4096 != 0
        || acq % 4096 != 0
        || !(1..=AQ_DEPTH_LOG2_MAX).contains(&depth_log2)
    {
        log::warn!(
            "{}: ENABLE with invalid admin queue (aq {aq:#x}, acq {acq:#x}, depth 2^{depth_log2})",
            rnic.name()
        );
        fatal(rnic, st, FatalCode::BadAdminConfig);
        return;
    }
    st.objects
        .uctxs
        .insert_at(KERNEL_UCTX as usize, Uctx::new());
    st.admin = Some(AdminQueue {
        aq,
        acq,
        depth_log2,
        ci: 0,
    });
    st.regs.dev_status = bar0::DEV_STATUS_READY_MASK;
    log::debug!(
        "{}: enabled, admin queue depth {}",
        rnic.name(),
        1u32 << depth_log2
    );
}

/// The device cannot go on: FATAL until reset.
pub fn fatal(rnic: &Rnic, st: &mut RnicState, code: FatalCode) {
    log::error!(
        "{}: fatal device error {code:?}; a reset is needed",
        rnic.name()
    );
    st.regs.dev_status = bar0::DEV_STATUS_FATAL_MASK;
    st.regs.fatal_code = u32::from(code);
    st.admin = None;
    crate::datapath::events::post_async(rnic, st, vrnic_hw::EventType::DeviceFatal, 0, 0);
}

/// AQ_DOORBELL was written with producer index `pi`: run every new command.
pub fn doorbell(rnic: &Rnic, st: &mut RnicState, pi: u32) {
    let Some(mem) = st.mem() else { return };
    let Some(queue) = st.admin.as_ref() else {
        log::warn!(
            "{}: admin doorbell while the device is not enabled ignored",
            rnic.name()
        );
        return;
    };
    let pending = pi.wrapping_sub(queue.ci);
    if pending > queue.depth() {
        log::warn!(
            "{}: admin doorbell {pi} is {pending} commands ahead of a queue of {}; ignored",
            rnic.name(),
            queue.depth()
        );
        return;
    }
    for _ in 0..pending {
        let Some(queue) = st.admin.as_ref() else {
            return;
        };
        let index = queue.ci;
        let slot = u64::from(index & (queue.depth() - 1));
        let mut cmd = [0u8; AQ_ENTRY_SIZE as usize];
        if mem
            .read(queue.aq + slot * u64::from(AQ_ENTRY_SIZE), &mut cmd)
            .is_err()
        {
            fatal(rnic, st, FatalCode::AdminDma);
            return;
        }
        let (acq, phase) = (
            queue.acq + slot * u64::from(ACQ_ENTRY_SIZE),
            phase(index, queue.depth_log2),
        );
        let completion = commands::execute(rnic, st, &mem, &cmd);
        if publish(&mem, acq, completion, phase).is_err() {
            fatal(rnic, st, FatalCode::AdminDma);
            return;
        }
        if let Some(queue) = st.admin.as_mut() {
            queue.ci = index.wrapping_add(1);
        }
    }
    st.irqs.signal(0);
}

fn phase(index: u32, depth_log2: u32) -> u8 {
    (((index >> depth_log2) & 1) ^ 1) as u8
}

/// Writes every field but `owner`, then `owner` with release ordering.
fn publish(
    mem: &RamSnapshot,
    addr: u64,
    mut c: AqCompletion,
    phase: u8,
) -> Result<(), crate::guest_memory::DmaError> {
    c.owner = 0;
    let body = &c.as_slice()[..AqCompletion::OWNER_OFF];
    mem.write(addr, body)?;
    mem.store_u8(
        addr + AqCompletion::OWNER_OFF as u64,
        phase,
        Ordering::Release,
    )
}

/// A completion for `cmd_id` with the outcome of a command.
fn completion(cmd_id: u32, opcode: u8, outcome: error::CmdResult<[u32; 4]>) -> AqCompletion {
    let mut c = AqCompletion {
        cmd_id: cmd_id.into(),
        opcode,
        ..Default::default()
    };
    match outcome {
        Ok(results) => {
            c.status = u8::from(AqStatus::Success);
            c.err_offset = (vrnic_hw::AQ_ERR_OFFSET_NONE as u16).into();
            c.result0 = results[0].into();
            c.result1 = results[1].into();
            c.result2 = results[2].into();
            c.result3 = results[3].into();
        }
        Err(e) => {
            c.status = u8::from(e.status);
            c.err_offset = e.err_offset().into();
        }
    }
    c
}
