//! QUERY_COUNTERS: the counters of the port or of one QP, written to the guest (SPEC
//! "Counters", cmd_query_counters).

use super::commands::owned;
use super::error::{bad_field, bad_handle, permission, CmdError, CmdResult};
use crate::guest_memory::RamSnapshot;
use crate::objects::counters::COUNT;
use crate::rnic::{Rnic, RnicState};
use vrnic_hw::{
    AqStatus, CmdQueryCounters as Cmd, CounterScope, COUNTER_COUNT_MAX, KERNEL_UCTX, PORT_NUM,
};

pub fn query_counters(
    rnic: &Rnic,
    st: &RnicState,
    mem: &RamSnapshot,
    cmd: &Cmd,
) -> CmdResult<[u32; 4]> {
    let out_len = cmd.out_len.to_native();
    if out_len == 0 || !out_len.is_multiple_of(8) || out_len > 8 * COUNTER_COUNT_MAX {
        return Err(bad_field(Cmd::OUT_LEN_OFF));
    }
    let (port, qpn, uctx) = (cmd.port, cmd.qpn.to_native(), cmd.uctx.to_native());
    let values = match CounterScope::try_from(cmd.scope) {
        Ok(CounterScope::Port) => {
            if u32::from(port) != PORT_NUM {
                return Err(bad_field(Cmd::PORT_OFF));
            }
            if qpn != 0 {
                return Err(bad_field(Cmd::QPN_OFF));
            }
            // The port counts every context's QPs: only the kernel reads it.
            if uctx != KERNEL_UCTX {
                return Err(permission(Cmd::UCTX_OFF));
            }
            rnic.port_counters()
        }
        Ok(CounterScope::Qp) => {
            if port != 0 {
                return Err(bad_field(Cmd::PORT_OFF));
            }
            let qp = st.objects.qp(qpn).ok_or(bad_handle(Cmd::QPN_OFF))?;
            owned(qp.uctx, uctx, Cmd::UCTX_OFF)?;
            qp.counters.read()
        }
        Err(_) => return Err(bad_field(Cmd::SCOPE_OFF)),
    };
    let out_addr = cmd.out_addr.to_native();
    let bad_address = CmdError::new(AqStatus::BadAddress, Cmd::OUT_ADDR_OFF);
    if !out_addr.is_multiple_of(8) {
        return Err(bad_address);
    }
    // A driver built for fewer counters reads a prefix; one built for more learns how
    // many there are from result0.
    let n = (out_len as usize / 8).min(COUNT);
    let bytes: Vec<u8> = values[..n].iter().flat_map(|v| v.to_le_bytes()).collect();
    // RamSnapshot::write checks the whole range before it copies: a fault leaves the
    // buffer as it was.
    mem.write(out_addr, &bytes).map_err(|_| bad_address)?;
    Ok([n as u32, 0, 0, 0])
}
