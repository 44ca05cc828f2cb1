//! The admin queue of an in-process device, as a driver runs it (SPEC "Bring-up", "Admin
//! queue"), with the admin oracles: every completion echoes its command and carries a
//! status of the AqStatus enum.

use std::time::Instant;

use vm_memory::ByteValued;
use vrnic_hw::{
    bar0, AqCompletion, AqStatus, ACQ_ENTRY_SIZE, AQ_ENTRY_SIZE, AQ_ERR_OFFSET_NONE, BAR_CTRL,
};

use super::glue::Dev;
use super::guest::CanaryRam;
use crate::harness::TIMEOUT;

/// A command's outcome as its completion reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    pub status: AqStatus,
    pub err_offset: u16,
    pub results: [u32; 4],
}

impl Done {
    pub fn ok(&self) -> Option<[u32; 4]> {
        (self.status == AqStatus::Success).then_some(self.results)
    }
}

/// The admin queue pair in guest RAM.
pub struct Aq {
    aq: u64,
    acq: u64,
    depth_log2: u32,
    pi: u32,
    ci: u32,
    next_id: u32,
}

/// Steps 1-4 of SPEC "Bring-up": programs the queue registers, sets ENABLE and waits for
/// READY. None if the device refused (FATAL), as it must for invalid registers.
pub fn enable(
    dev: &mut Dev,
    ram: &mut CanaryRam,
    aq: u64,
    acq: u64,
    depth_log2: u32,
) -> Option<Aq> {
    ram.allow(acq, u64::from(ACQ_ENTRY_SIZE) << depth_log2.min(12));
    dev.write32(BAR_CTRL, bar0::AQ_BASE_LO, aq as u32);
    dev.write32(BAR_CTRL, bar0::AQ_BASE_HI, (aq >> 32) as u32);
    dev.write32(BAR_CTRL, bar0::ACQ_BASE_LO, acq as u32);
    dev.write32(BAR_CTRL, bar0::ACQ_BASE_HI, (acq >> 32) as u32);
    dev.write32(BAR_CTRL, bar0::AQ_DEPTH_LOG2, depth_log2);
    dev.write32(BAR_CTRL, bar0::DEV_CTRL, bar0::DEV_CTRL_ENABLE_MASK);
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let status = dev.read32(BAR_CTRL, bar0::DEV_STATUS);
        if status & bar0::DEV_STATUS_READY_MASK != 0 {
            break;
        }
        if status & bar0::DEV_STATUS_FATAL_MASK != 0 {
            return None;
        }
        assert!(
            Instant::now() < deadline,
            "device never became READY or FATAL"
        );
        std::thread::yield_now();
    }
    Some(Aq {
        aq,
        acq,
        depth_log2,
        pi: 0,
        ci: 0,
        next_id: 1,
    })
}

impl Aq {
    pub fn depth(&self) -> usize {
        1 << self.depth_log2
    }

    /// Runs one command (any `Cmd*`, its cmd_id is filled in).
    pub fn run<T: ByteValued>(&mut self, dev: &mut Dev, ram: &mut CanaryRam, cmd: &T) -> Done {
        let mut bytes = [0u8; AQ_ENTRY_SIZE as usize];
        let s = cmd.as_slice();
        let n = s.len().min(AQ_ENTRY_SIZE as usize);
        bytes[..n].copy_from_slice(&s[..n]);
        self.submit(dev, ram, &[bytes], 0).remove(0)
    }

    /// Writes `cmds`, rings AQ_DOORBELL once with the producer index moved `extra` entries
    /// further than the commands written (the device then also runs whatever those slots
    /// hold), and collects every completion the device owes, checking each one.
    pub fn submit(
        &mut self,
        dev: &mut Dev,
        ram: &mut CanaryRam,
        cmds: &[[u8; AQ_ENTRY_SIZE as usize]],
        extra: u32,
    ) -> Vec<Done> {
        let depth = 1u32 << self.depth_log2;
        let mut expect = Vec::new();
        for cmd in cmds.iter().take(depth as usize) {
            let mut bytes = *cmd;
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1);
            bytes[4..8].copy_from_slice(&id.to_le_bytes());
            let slot = u64::from(self.pi & (depth - 1));
            ram.write(self.aq + slot * u64::from(AQ_ENTRY_SIZE), &bytes);
            self.pi = self.pi.wrapping_add(1);
            expect.push(Some((id, bytes[0])));
        }
        let extra = extra.min(depth - expect.len() as u32);
        for _ in 0..extra {
            self.pi = self.pi.wrapping_add(1);
            expect.push(None);
        }
        dev.write32(BAR_CTRL, bar0::AQ_DOORBELL, self.pi);
        expect
            .into_iter()
            .filter_map(|e| self.collect(dev, ram, e))
            .collect()
    }

    /// Waits for the next completion; checks it against the command (`None`: a slot the
    /// driver did not write this time, whose id and opcode are unknown).
    fn collect(&mut self, dev: &mut Dev, ram: &CanaryRam, cmd: Option<(u32, u8)>) -> Option<Done> {
        let slot = u64::from(self.ci & ((1 << self.depth_log2) - 1));
        let addr = self.acq + slot * u64::from(ACQ_ENTRY_SIZE);
        let phase = (((self.ci >> self.depth_log2) & 1) ^ 1) as u8;
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let owner: u8 = ram
                .load(addr + AqCompletion::OWNER_OFF as u64)
                .expect("ACQ in guest RAM");
            if owner & 1 == phase {
                break;
            }
            let status = dev.read32(BAR_CTRL, bar0::DEV_STATUS);
            assert!(
                status & bar0::DEV_STATUS_FATAL_MASK == 0,
                "device FATAL (code {}) instead of completing admin command {cmd:?}",
                dev.read32(BAR_CTRL, bar0::FATAL_CODE)
            );
            assert!(
                Instant::now() < deadline,
                "no admin completion for {cmd:?} within {TIMEOUT:?}"
            );
            std::thread::yield_now();
        }
        let c: AqCompletion = ram.read_obj(addr).expect("ACQ entry");
        self.ci = self.ci.wrapping_add(1);
        let status = AqStatus::try_from(c.status)
            .unwrap_or_else(|s| panic!("completion status {s} is not an AqStatus ({c:?})"));
        assert_eq!(c.reserved0, [0; 7], "completion reserved bytes: {c:?}");
        let err_offset = c.err_offset.to_native();
        if status == AqStatus::Success {
            assert_eq!(
                u32::from(err_offset),
                AQ_ERR_OFFSET_NONE,
                "a successful command names no field: {c:?}"
            );
        } else {
            assert!(
                u32::from(err_offset) == AQ_ERR_OFFSET_NONE
                    || u32::from(err_offset) < AQ_ENTRY_SIZE,
                "err_offset {err_offset} is outside the command: {c:?}"
            );
        }
        if let Some((id, opcode)) = cmd {
            assert_eq!(
                c.cmd_id.to_native(),
                id,
                "completion for another command: {c:?}"
            );
            assert_eq!(c.opcode, opcode, "completion echoes the opcode: {c:?}");
        }
        Some(Done {
            status,
            err_offset,
            results: [
                c.result0.to_native(),
                c.result1.to_native(),
                c.result2.to_native(),
                c.result3.to_native(),
            ],
        })
    }
}
