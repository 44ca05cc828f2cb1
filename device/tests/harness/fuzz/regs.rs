//! Target 2: PCI config space, BAR0 (registers, MSI-X table), BAR2 (doorbell pages) and
//! BAR4 (kick pages) accesses on an in-process device, as `DeviceModel` calls (the server
//! has already checked them against the region size, which this target keeps to).
//! Offsets come mostly from the spec's register tables and the PCI capability layout,
//! values mostly make sense for the register (guest RAM addresses for queue bases, ENABLE
//! and RESET for DEV_CTRL, small producer indices), sizes are mostly 4.
//!
//! Oracles: read-only registers and the PCI identity keep their spec values whatever was
//! written; the device writes guest RAM only inside the admin completion queues the input
//! enabled; afterwards a reset device comes up and answers QUERY_DEVICE and QUERY_PORT.

use std::cell::RefCell;

use vrnic_hw::*;

use super::admin::check_alive;
use super::aq;
use super::glue::Dev;
use super::guest::{CanaryRam, PAGE};
use super::input::Input;
use super::rig::{Rig, ACQ_ADDR, AQ_ADDR, INTERESTING_ADDRS, RAM_BASE, RAM_SIZE};
use super::stats;

thread_local! {
    static RIG: RefCell<Option<Rig>> = const { RefCell::new(None) };
}

/// Runs one input (the function both runners call).
pub fn run_one(input: &[u8]) {
    RIG.with(|cell| {
        let mut slot = cell.borrow_mut();
        let rig = slot.get_or_insert_with(|| Rig::new(1, true));
        run(rig, input);
    });
}

/// Forgets the rig after a failure; the next input builds a new one.
pub fn discard() {
    RIG.with(|cell| {
        if let Ok(mut slot) = cell.try_borrow_mut() {
            std::mem::forget(slot.take());
        }
    });
}

/// vfio-user region index of PCI config space.
const CONFIG: u32 = 7;

/// Interesting config-space offsets: header fields, BARs, the capability list, the PCIe
/// capability (device control holds INITIATE_FLR), MSI-X, extended space.
const CONFIG_OFFSETS: &[u64] = &[
    0x00, 0x02, 0x04, 0x06, 0x08, 0x0c, 0x0e, 0x10, 0x14, 0x18, 0x1c, 0x20, 0x24, 0x2c, 0x30, 0x34,
    0x3c, 0x3d, 0x40, 0x42, 0x44, 0x48, 0x49, 0x4a, 0x80, 0x82, 0x84, 0x88, 0x100, 0xffc,
];

fn size(inp: &mut Input) -> usize {
    match inp.u8() % 16 {
        0..=9 => 4,
        10 => 1,
        11 => 2,
        12 => 8,
        13 => 3,
        14 => 16,
        _ => 1 + inp.below(64),
    }
}

/// Clips an access to the region (the vfio-user server refuses anything else).
fn clip(offset: u64, len: usize, region: u64) -> (u64, usize) {
    let offset = offset % region.max(1);
    let len = (len as u64).min(region - offset) as usize;
    (offset, len.max(1))
}

/// A value for BAR0 register `offset`.
fn reg_value(inp: &mut Input, offset: u64) -> u32 {
    let addr = if inp.chance(80) {
        RAM_BASE + (inp.below((RAM_SIZE / PAGE) as usize) as u64) * PAGE
    } else {
        inp.pick(INTERESTING_ADDRS)
    };
    let v = match offset {
        bar0::AQ_BASE_LO | bar0::ACQ_BASE_LO => addr as u32,
        bar0::AQ_BASE_HI | bar0::ACQ_BASE_HI => (addr >> 32) as u32,
        bar0::AQ_DEPTH_LOG2 => inp.below(14) as u32,
        bar0::DEV_CTRL => inp.pick(&[
            bar0::DEV_CTRL_ENABLE_MASK,
            bar0::DEV_CTRL_RESET_MASK,
            0,
            bar0::DEV_CTRL_ENABLE_MASK | bar0::DEV_CTRL_RESET_MASK,
        ]),
        bar0::AQ_DOORBELL => inp.below(20) as u32,
        _ => inp.u32(),
    };
    inp.mostly_u32(v)
}

/// Allows device writes to the admin completion queue the registers now describe (checked
/// on every DEV_CTRL write: ENABLE latches them).
fn allow_acq(dev: &mut Dev, ram: &mut CanaryRam) {
    let lo = dev.read32(BAR_CTRL, bar0::ACQ_BASE_LO);
    let hi = dev.read32(BAR_CTRL, bar0::ACQ_BASE_HI);
    let depth = dev
        .read32(BAR_CTRL, bar0::AQ_DEPTH_LOG2)
        .min(AQ_DEPTH_LOG2_MAX);
    let acq = u64::from(hi) << 32 | u64::from(lo);
    ram.allow(acq, u64::from(ACQ_ENTRY_SIZE) << depth);
}

fn op(inp: &mut Input, dev: &mut Dev, ram: &mut CanaryRam) {
    match inp.u8() % 12 {
        0 | 1 => {
            let off = if inp.chance(80) {
                inp.pick(CONFIG_OFFSETS)
            } else {
                u64::from(inp.u16())
            };
            let (off, len) = clip(off, size(inp), u64::from(PCI_CONFIG_SIZE));
            let mut buf = vec![0u8; len];
            let r = dev.read(CONFIG, off, &mut buf);
            stats::count(
                "regs",
                format_args!("config read {}", if r.is_ok() { "ok" } else { "err" }),
            );
        }
        2 | 3 => {
            let off = if inp.chance(80) {
                inp.pick(CONFIG_OFFSETS)
            } else {
                u64::from(inp.u16())
            };
            let (off, len) = clip(off, size(inp), u64::from(PCI_CONFIG_SIZE));
            let mut data = inp.bytes(len).to_vec();
            data.resize(len, 0xff);
            // FLR now and then (PCIe device control, bit 15).
            if inp.chance(3) {
                let devctl = u64::from(PCI_CAP_PCIE_OFF) + 8;
                let r = dev.write(CONFIG, devctl, &0x8000u16.to_le_bytes());
                stats::count(
                    "regs",
                    format_args!("FLR {}", if r.is_ok() { "ok" } else { "err" }),
                );
            } else {
                let r = dev.write(CONFIG, off, &data);
                stats::count(
                    "regs",
                    format_args!(
                        "config write {off:#x}+{len} {}",
                        if r.is_ok() { "ok" } else { "err" }
                    ),
                );
            }
        }
        4 | 5 => {
            let off = if inp.chance(85) {
                inp.pick(bar0::REGISTERS).1
            } else {
                u64::from(inp.u16())
            };
            let (off, len) = clip(off, size(inp), u64::from(BAR_CTRL_SIZE));
            let mut buf = vec![0u8; len];
            let r = dev.read(BAR_CTRL, off, &mut buf);
            stats::count(
                "regs",
                format_args!("bar0 read {}", if r.is_ok() { "ok" } else { "err" }),
            );
        }
        6..=8 => {
            let reg = inp.pick(bar0::REGISTERS).1;
            let off = if inp.chance(85) {
                reg
            } else {
                u64::from(inp.u16())
            };
            let value = reg_value(inp, reg);
            let len = if inp.chance(90) { 4 } else { size(inp) };
            let (off, len) = clip(off, len, u64::from(BAR_CTRL_SIZE));
            let mut data = value.to_le_bytes().to_vec();
            data.resize(len, 0);
            if off == bar0::DEV_CTRL {
                allow_acq(dev, ram);
            }
            let r = dev.write(BAR_CTRL, off, &data);
            let name = bar0::REGISTERS
                .iter()
                .find(|r| r.1 == off)
                .map_or("(no register)", |r| r.0);
            stats::count(
                "regs",
                format_args!("write {name} {}", if r.is_ok() { "ok" } else { "err" }),
            );
            if off == bar0::DEV_CTRL || off == bar0::AQ_DOORBELL {
                let status = dev.read32(BAR_CTRL, bar0::DEV_STATUS);
                let code = dev.read32(BAR_CTRL, bar0::FATAL_CODE);
                stats::count(
                    "regs",
                    format_args!("after {name}: status {status:#x} fatal code {code}"),
                );
            }
        }
        9 => {
            let page = if inp.chance(80) {
                inp.below(4) as u64
            } else {
                inp.below(DB_PAGES as usize) as u64
            };
            // A slot, a slot's flag byte, PAGE_FLAG/POLL_STATE, or anywhere in the page.
            let slot = match inp.u8() % 10 {
                0..=5 => db_slot_offset(inp.below(DB_SLOTS_PER_PAGE as usize + 2) as u32),
                6 | 7 => db_flag_offset(inp.below(DB_SLOTS_PER_PAGE as usize + 2) as u32),
                8 => inp.pick(&[db_page::POLL_STATE, db_page::PAGE_FLAG]),
                _ => u64::from(inp.u16()),
            };
            let off = page * u64::from(DB_PAGE_SIZE) + slot + 4 * inp.below(2) as u64;
            let (off, len) = clip(off, size(inp), u64::from(BAR_DB_SIZE));
            let mut data = inp.bytes(len).to_vec();
            data.resize(len, 0);
            let r = if inp.bool() {
                dev.write(BAR_DB, off, &data)
            } else {
                dev.read(BAR_DB, off, &mut data)
            };
            stats::count(
                "regs",
                format_args!("bar2 {}", if r.is_ok() { "ok" } else { "err" }),
            );
        }
        10 => {
            let off = u64::from(inp.below(DB_PAGES as usize) as u32) * u64::from(DB_PAGE_SIZE)
                + if inp.chance(90) {
                    kick_page::KICK
                } else {
                    u64::from(inp.u16()) % u64::from(DB_PAGE_SIZE)
                };
            let (off, len) = clip(off, size(inp), u64::from(BAR_KICK_SIZE));
            let mut data = inp.bytes(len).to_vec();
            data.resize(len, 1);
            let r = if inp.chance(80) {
                dev.write(BAR_KICK, off, &data)
            } else {
                dev.read(BAR_KICK, off, &mut data)
            };
            stats::count(
                "regs",
                format_args!("bar4 {}", if r.is_ok() { "ok" } else { "err" }),
            );
        }
        11 if inp.bool() => {
            // Bring-up as a driver does it (SPEC "Bring-up"), values sometimes mutated.
            let aq = RAM_BASE + (inp.below((RAM_SIZE / PAGE) as usize) as u64) * PAGE;
            let acq = RAM_BASE + (inp.below((RAM_SIZE / PAGE) as usize) as u64) * PAGE;
            let depth = 1 + inp.below(AQ_DEPTH_LOG2_MAX as usize) as u32;
            let writes = [
                (bar0::AQ_BASE_LO, aq as u32),
                (bar0::AQ_BASE_HI, (aq >> 32) as u32),
                (bar0::ACQ_BASE_LO, acq as u32),
                (bar0::ACQ_BASE_HI, (acq >> 32) as u32),
                (bar0::AQ_DEPTH_LOG2, depth),
            ];
            for (off, v) in writes {
                let v = inp.mostly_u32(v);
                let _ = dev.write(BAR_CTRL, off, &v.to_le_bytes());
            }
            allow_acq(dev, ram);
            let _ = dev.write(
                BAR_CTRL,
                bar0::DEV_CTRL,
                &bar0::DEV_CTRL_ENABLE_MASK.to_le_bytes(),
            );
            let status = dev.read32(BAR_CTRL, bar0::DEV_STATUS);
            stats::count("regs", format_args!("bring-up: status {status:#x}"));
        }
        11 if inp.bool() => {
            // Bring-up as a driver does it (SPEC "Bring-up"), values sometimes mutated.
            let aq = RAM_BASE + (inp.below((RAM_SIZE / PAGE) as usize) as u64) * PAGE;
            let acq = RAM_BASE + (inp.below((RAM_SIZE / PAGE) as usize) as u64) * PAGE;
            let depth = 1 + inp.below(AQ_DEPTH_LOG2_MAX as usize) as u32;
            let writes = [
                (bar0::AQ_BASE_LO, aq as u32),
                (bar0::AQ_BASE_HI, (aq >> 32) as u32),
                (bar0::ACQ_BASE_LO, acq as u32),
                (bar0::ACQ_BASE_HI, (acq >> 32) as u32),
                (bar0::AQ_DEPTH_LOG2, depth),
            ];
            for (off, v) in writes {
                let v = inp.mostly_u32(v);
                let _ = dev.write(BAR_CTRL, off, &v.to_le_bytes());
            }
            allow_acq(dev, ram);
            let enable = bar0::DEV_CTRL_ENABLE_MASK.to_le_bytes();
            let _ = dev.write(BAR_CTRL, bar0::DEV_CTRL, &enable);
            let status = dev.read32(BAR_CTRL, bar0::DEV_STATUS);
            stats::count("regs", format_args!("bring-up: status {status:#x}"));
        }
        _ => {
            dev.reset();
            stats::count("regs", "DEVICE_RESET");
        }
    }
}

/// Read-only registers and the PCI identity still read as the spec says.
fn check_identity(dev: &mut Dev, lid: u16) {
    for &(name, offset, access, reset) in bar0::REGISTERS {
        if access != RegAccess::Ro || [bar0::DEV_STATUS, bar0::FATAL_CODE].contains(&offset) {
            continue;
        }
        let want = if offset == bar0::PORT_INFO {
            reset | u32::from(lid)
        } else {
            reset
        };
        let got = dev.read32(BAR_CTRL, offset);
        assert_eq!(got, want, "read-only register {name} changed");
    }
    let ids = dev.read32(CONFIG, 0);
    assert_eq!(
        ids,
        PCI_VENDOR_ID | PCI_DEVICE_ID << 16,
        "PCI vendor/device ID changed"
    );
    let sub = dev.read32(CONFIG, 0x2c);
    assert_eq!(
        sub,
        PCI_SUBSYSTEM_VENDOR_ID | PCI_SUBSYSTEM_ID << 16,
        "PCI subsystem IDs changed"
    );
    let class = dev.read32(CONFIG, 0x08);
    assert_eq!(
        class,
        PCI_REVISION | PCI_CLASS_CODE << 8,
        "PCI class/revision changed"
    );
}

fn run(rig: &mut Rig, input: &[u8]) {
    let mut inp = Input::new(input);
    rig.begin();
    let (dev, ram) = (&mut rig.world.devs[0], &mut rig.rams[0]);
    let mut ops = 0;
    while !inp.is_empty() && ops < 256 {
        ops += 1;
        op(&mut inp, dev, ram);
    }
    check_identity(dev, 1);
    rig.finish("regs");
    let (dev, ram, aqram) = (&mut rig.world.devs[0], &mut rig.rams[0], &mut rig.aqs[0]);
    let mut aq = aq::enable(dev, aqram, AQ_ADDR, ACQ_ADDR, 2)
        .expect("after a reset, the device refused a valid admin queue");
    let mut heap = Rig::heap(2);
    check_alive(&mut aq, dev, aqram, ram, &mut heap, 1);
}
