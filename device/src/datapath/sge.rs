//! Scatter/gather lists: reading them from a WQE and resolving them through MRs.

use super::copy::Pieces;
use crate::guest_memory::{DmaError, RamSnapshot};
use crate::objects::Objects;
use vrnic_hw::{bar0, Sge, VendorErr, WcStatus, KERNEL_UCTX, LOCAL_DMA_LKEY};

/// Reads `count` SGEs at `addr`.
pub fn read(mem: &RamSnapshot, addr: u64, count: usize) -> Result<Vec<Sge>, DmaError> {
    (0..count as u64)
        .map(|i| mem.read_obj(addr + i * Sge::SIZE as u64))
        .collect()
}

/// Whose SGEs are checked: the QP's PD and whether it is the kernel context's, whose SGEs
/// may use LOCAL_DMA_LKEY (SPEC "Kernel DMA key").
#[derive(Debug, Clone, Copy)]
pub struct Owner {
    pub pdn: u32,
    pub kernel: bool,
}

impl Owner {
    pub fn of(qp: &crate::objects::Qp) -> Self {
        Owner {
            pdn: qp.pdn,
            kernel: qp.uctx == KERNEL_UCTX,
        }
    }
}

/// Checks every SGE against its MR (key, PD, `access`, bounds) and returns the total
/// length. Costs one look-up per SGE, whatever the lengths. A kernel QP's LOCAL_DMA_LKEY
/// SGE names guest DMA addresses directly, with local read and write access (the device
/// checks them against guest memory when it moves the data).
pub fn check(
    objects: &Objects,
    owner: Owner,
    sges: &[Sge],
    access: u32,
) -> Result<u64, (WcStatus, VendorErr)> {
    let pdn = owner.pdn;
    let mut total: u64 = 0;
    for sge in sges {
        let len = u64::from(sge.length.to_native());
        if len == 0 {
            continue;
        }
        if sge.lkey.to_native() == LOCAL_DMA_LKEY {
            if !owner.kernel {
                return Err((WcStatus::LocProtErr, VendorErr::BadLkey));
            }
            sge.addr
                .to_native()
                .checked_add(len)
                .ok_or((WcStatus::LocProtErr, VendorErr::LocalBounds))?;
            total += len;
            continue;
        }
        let mr = objects
            .mr_by_key(sge.lkey.to_native())
            .ok_or((WcStatus::LocProtErr, VendorErr::BadLkey))?;
        if mr.pdn != pdn {
            return Err((WcStatus::LocProtErr, VendorErr::PdMismatch));
        }
        if !mr.allows(access) {
            return Err((WcStatus::LocAccessErr, VendorErr::LocalAccess));
        }
        mr.range(sge.addr.to_native(), len)
            .ok_or((WcStatus::LocProtErr, VendorErr::LocalBounds))?;
        total += len;
    }
    if total > u64::from(bar0::MAX_MSG_SIZE_RESET) {
        return Err((WcStatus::LocLenErr, VendorErr::Length));
    }
    Ok(total)
}

/// The guest pieces of bytes `[offset, offset + len)` of the message the (checked) SGEs
/// describe. Costs what those bytes span, not what the whole message does.
pub fn pieces(objects: &Objects, sges: &[Sge], offset: u64, len: u64) -> Pieces {
    let mut out = Vec::new();
    let (mut skip, mut left) = (offset, len);
    for sge in sges {
        if left == 0 {
            break;
        }
        let n = u64::from(sge.length.to_native());
        if skip >= n {
            skip -= n;
            continue;
        }
        let take = (n - skip).min(left);
        if sge.lkey.to_native() == LOCAL_DMA_LKEY {
            // Checked: only a kernel QP's SGE gets here with the DMA key.
            out.push((sge.addr.to_native() + skip, take));
        } else if let Some(range) = objects
            .mr_by_key(sge.lkey.to_native())
            .and_then(|mr| mr.range(sge.addr.to_native() + skip, take))
        {
            out.extend(range);
        }
        left -= take;
        skip = 0;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::page_list::GuestPages;
    use crate::objects::Mr;
    use crate::objects::Objects;

    /// A 2 GiB MR whose page list names the same 4 KiB page 512K times (cheap to register).
    fn objects_with_repeating_mr() -> (Objects, Sge) {
        let mut o = Objects::new();
        let (index, key) = o.next_key().unwrap();
        let len = 2u64 << 30;
        o.insert_mr(
            index,
            Mr {
                key,
                pdn: 0,
                uctx: 1,
                iova: 0,
                length: len,
                access: 1,
                pages: GuestPages::list(vec![0x10_0000; (len >> 12) as usize], 12),
                first_offset: 0,
            },
        );
        let sge = Sge {
            addr: 0.into(),
            length: (len as u32 - 1).into(),
            lkey: key.into(),
        };
        (o, sge)
    }

    #[test]
    fn a_chunk_of_a_huge_message_costs_what_the_chunk_spans() {
        let (o, sge) = objects_with_repeating_mr();
        let owner = Owner {
            pdn: 0,
            kernel: false,
        };
        let total = check(&o, owner, &[sge], 0).unwrap();

        let middle = pieces(&o, &[sge], 1 << 30, 1 << 20);

        assert_eq!(total, (2u64 << 30) - 1);
        assert_eq!(middle.len(), 256, "one piece per page of the 1 MiB chunk");
        assert_eq!(middle.iter().map(|p| p.1).sum::<u64>(), 1 << 20);
    }

    #[test]
    fn the_dma_key_names_guest_addresses_for_the_kernel_only() {
        let o = Objects::new();
        let sges = [
            Sge {
                addr: 0x20_0000.into(),
                length: 0x1800.into(),
                lkey: LOCAL_DMA_LKEY.into(),
            },
            Sge {
                addr: 0x9000.into(),
                length: 0x10.into(),
                lkey: LOCAL_DMA_LKEY.into(),
            },
        ];
        let kernel = Owner {
            pdn: 3,
            kernel: true,
        };
        let user = Owner {
            pdn: 3,
            kernel: false,
        };

        assert_eq!(check(&o, kernel, &sges, 1), Ok(0x1810));
        assert_eq!(
            pieces(&o, &sges, 0x1000, 0x810),
            vec![(0x20_1000, 0x800), (0x9000, 0x10)]
        );
        assert_eq!(
            check(&o, user, &sges, 1),
            Err((WcStatus::LocProtErr, VendorErr::BadLkey))
        );
    }
}
