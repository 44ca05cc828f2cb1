//! The admin queue engine: reads commands from the guest's admin queue, executes them in
//! order and publishes completions (SPEC "Admin queue").
//!
//! Each command takes the device lock once, for its own execution only: page lists are
//! read from guest memory before (`prefetch`), without the lock, and a command that revokes
//! access waits for the DMA fence after, without the lock, before its completion is
//! published. A doorbell naming thousands of commands therefore never holds the device for
//! longer than one of them.

mod commands;
mod counters;
pub mod error;
mod gid;
mod memory;
mod mw;
mod prefetch;
mod qp;
mod queues;
mod srq;
mod xrcd;

use crate::faults::plan::AdminAct;
use crate::objects::{Uctx, KERNEL_DB_PAGE};
use crate::rnic::contract::report;
use crate::rnic::notify::publish;
use crate::rnic::{AdminQueue, Rnic, RnicState};
use vrnic_hw::{
    bar0, AqCompletion, AqHeader, AqOpcode, AqStatus, ContractRule, FatalCode, ACQ_ENTRY_SIZE,
    AQ_DEPTH_LOG2_MAX, AQ_ENTRY_SIZE, KERNEL_UCTX,
};

pub use commands::execute;
pub use prefetch::PageListReads;

/// DEV_CTRL.ENABLE was set: latch the admin queue registers and start.
pub fn enable(rnic: &Rnic, st: &mut RnicState) {
    if st.regs.dev_status & bar0::DEV_STATUS_FATAL_MASK != 0 {
        // Only a reset recovers (SPEC "Fatal errors").
        st.warn(rnic, format_args!("ENABLE on a FATAL device ignored"));
        return;
    }
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
        st.warn(
            rnic,
            format_args!(
                "ENABLE with invalid admin queue (aq {aq:#x}, acq {acq:#x}, depth 2^{depth_log2})"
            ),
        );
        fatal(rnic, st, FatalCode::BadAdminConfig);
        return;
    }
    st.objects
        .uctxs
        .insert_at(KERNEL_UCTX as usize, Uctx::new(KERNEL_DB_PAGE));
    rnic.doorbells.give_page(KERNEL_DB_PAGE);
    // Counters start at 0 when the device is enabled (SPEC "Counters").
    rnic.counters.clear();
    st.admin = Some(AdminQueue {
        aq,
        acq,
        depth_log2,
        ci: 0,
    });
    st.regs.dev_status = bar0::DEV_STATUS_READY_MASK;
    rnic.trace.device_state("ENABLED", None);
    log::debug!(
        "{}: enabled, admin queue depth {}",
        rnic.name(),
        1u32 << depth_log2
    );
}

/// The device cannot go on: FATAL until reset. It stops executing work and answering
/// requests (`RnicState::serving`).
pub fn fatal(rnic: &Rnic, st: &mut RnicState, code: FatalCode) {
    rnic.fatal(st, code, 0);
}

/// A command read from the queue, with where its completion goes.
struct Fetched {
    index: u32,
    cmd: [u8; AQ_ENTRY_SIZE as usize],
    acq: u64,
    phase: u8,
}

/// Reads the command at the queue's consumer index (under the lock: the queue is state).
fn fetch(rnic: &Rnic, st: &mut RnicState) -> Option<(Fetched, crate::guest_memory::RamSnapshot)> {
    let mem = st.mem()?;
    let queue = st.admin.as_ref()?;
    let index = queue.ci;
    let slot = u64::from(index & (queue.depth() - 1));
    let mut cmd = [0u8; AQ_ENTRY_SIZE as usize];
    let (aq, acq, phase) = (
        queue.aq + slot * u64::from(AQ_ENTRY_SIZE),
        queue.acq + slot * u64::from(ACQ_ENTRY_SIZE),
        queue.phase(index),
    );
    if mem.read(aq, &mut cmd).is_err() {
        fatal(rnic, st, FatalCode::AdminDma);
        return None;
    }
    Some((
        Fetched {
            index,
            cmd,
            acq,
            phase,
        },
        mem,
    ))
}

/// AQ_DOORBELL was written with producer index `pi`: run every new command.
pub fn doorbell(rnic: &Rnic, pi: u32) {
    rnic.trace.admin_doorbell(pi);
    if rnic.faults.admin_gate(pi) {
        return;
    }
    let pending = {
        let mut st = rnic.lock();
        let Some(queue) = st.admin.as_ref() else {
            report(
                rnic,
                &mut st,
                ContractRule::AqDoorbellDisabled,
                format_args!("admin doorbell {pi} while the device is not enabled ignored"),
            );
            return;
        };
        let (pending, depth) = (pi.wrapping_sub(queue.ci), queue.depth());
        if pending > depth {
            report(
                rnic,
                &mut st,
                ContractRule::AqPiBeyondRing,
                format_args!(
                    "admin doorbell {pi} is {pending} commands ahead of a queue of {depth}; ignored"
                ),
            );
            return;
        }
        pending
    };
    for _ in 0..pending {
        let started = rnic.trace.admin_start();
        let Some((fetched, mem)) = fetch(rnic, &mut rnic.lock()) else {
            break;
        };
        match rnic.faults.admin_command(fetched.index, &fetched.cmd, pi) {
            Some(AdminAct::Hold) => break,
            Some(AdminAct::Fail(c)) if complete(rnic, &mut rnic.lock(), &mem, &fetched, c) => {
                continue
            }
            Some(AdminAct::Fail(_)) => break,
            None => {}
        }
        before_execute(rnic, &fetched.cmd);
        let mut reads = PageListReads::prefetch(&mem, &fetched.cmd);
        let (completion, wait_for_dma) = {
            let mut st = rnic.lock();
            if st.admin.is_none() {
                break;
            }
            execute(rnic, &mut st, &mem, &fetched.cmd, &mut reads)
        };
        rnic.faults.admin_done(&completion);
        if wait_for_dma {
            rnic.fence.wait();
        }
        let mut st = rnic.lock();
        if !complete(rnic, &mut st, &mem, &fetched, completion) {
            break;
        }
        rnic.trace.admin(started, &fetched.cmd, &completion);
    }
    rnic.lock().pending_irqs.raise(0);
}

/// What a command waits for before it runs, without the device lock.
fn before_execute(rnic: &Rnic, cmd: &[u8]) {
    let hdr: AqHeader = commands::parse(cmd);
    if AqOpcode::try_from(hdr.opcode) == Ok(AqOpcode::ResizeCq) {
        queues::take_up_posted_sends(rnic, &commands::parse(cmd));
    }
}

/// Publishes a command's completion and consumes the command. False if the device failed.
fn complete(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &crate::guest_memory::RamSnapshot,
    fetched: &Fetched,
    mut completion: AqCompletion,
) -> bool {
    completion.owner = 0;
    rnic.hostile.admin_completion(&st.objects, &mut completion);
    if publish(
        mem,
        fetched.acq,
        &completion,
        AqCompletion::OWNER_OFF,
        fetched.phase,
    )
    .is_err()
    {
        fatal(rnic, st, FatalCode::AdminDma);
        return false;
    }
    match st.admin.as_mut() {
        Some(queue) => {
            queue.ci = fetched.index.wrapping_add(1);
            true
        }
        None => false,
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rnic::testing::{device_with_ram, RAM_BASE};
    use std::sync::atomic::Ordering;
    use vm_memory::ByteValued;
    use vrnic_hw::{AqHeader, AqOpcode, CmdHandle};

    fn command(opcode: AqOpcode, cmd_id: u32, handle: u32) -> CmdHandle {
        CmdHandle {
            hdr: AqHeader {
                opcode: opcode.into(),
                cmd_id: cmd_id.into(),
                ..Default::default()
            },
            handle: handle.into(),
            uctx: KERNEL_UCTX.into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_engine_runs_on_a_device_value_without_socket_or_threads() {
        let (rnic, mem) = device_with_ram(0x10000);
        let (aq, acq) = (RAM_BASE, RAM_BASE + 0x1000);
        {
            let mut st = rnic.lock();
            st.regs.aq_base_lo = aq as u32;
            st.regs.acq_base_lo = acq as u32;
            st.regs.aq_depth_log2 = 2;
            enable(&rnic, &mut st);
        }
        let cmds = [
            command(AqOpcode::AllocUctx, 7, 0),
            command(AqOpcode::DeallocPd, 8, 99),
        ];
        for (i, cmd) in cmds.iter().enumerate() {
            mem.write(aq + (i as u64) * u64::from(AQ_ENTRY_SIZE), cmd.as_slice())
                .unwrap();
        }

        doorbell(&rnic, 2);

        let done: Vec<AqCompletion> = (0..2)
            .map(|i| mem.read_obj(acq + i * u64::from(ACQ_ENTRY_SIZE)).unwrap())
            .collect();
        assert_eq!(
            done.iter()
                .map(|c| (c.cmd_id.to_native(), c.status, c.owner))
                .collect::<Vec<_>>(),
            vec![
                (7, u8::from(AqStatus::Success), 1),
                (8, u8::from(AqStatus::BadHandle), 1)
            ]
        );
        assert!(rnic
            .lock()
            .objects
            .uctxs
            .get(done[0].result0.to_native())
            .is_some());
        let owner = mem.load_u8(acq + AqCompletion::OWNER_OFF as u64, Ordering::Acquire);
        assert_eq!(owner.ok(), Some(1));
    }
}
