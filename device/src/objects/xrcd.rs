//! XRC domains (SPEC "XRC"): a name that groups XRC SRQs and XRC_TGT QPs, owned by the
//! kernel context, which decides which processes share it.

/// An XRC domain. It holds nothing of its own: the SRQs and TGT QPs name it, and it lives
/// until DEALLOC_XRCD once none does.
#[derive(Debug)]
pub struct Xrcd {
    /// KERNEL_UCTX (ALLOC_XRCD is refused to other contexts).
    pub uctx: u32,
}
