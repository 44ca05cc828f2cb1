//! How an admin command fails: a status code and, where one field is at fault, its offset.

use vrnic_hw::{AqStatus, AQ_ERR_OFFSET_NONE};

/// A failed admin command. `field` is the byte offset of the faulty field in the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{status:?} (field at offset {field:?})")]
pub struct CmdError {
    pub status: AqStatus,
    pub field: Option<usize>,
}

impl CmdError {
    pub fn new(status: AqStatus, field: usize) -> Self {
        CmdError {
            status,
            field: Some(field),
        }
    }

    /// A failure no single field explains.
    pub fn general(status: AqStatus) -> Self {
        CmdError {
            status,
            field: None,
        }
    }

    pub fn err_offset(&self) -> u16 {
        self.field
            .and_then(|f| u16::try_from(f).ok())
            .unwrap_or(AQ_ERR_OFFSET_NONE as u16)
    }
}

pub type CmdResult<T> = Result<T, CmdError>;

impl From<crate::objects::page_list::PageListError> for CmdError {
    fn from(e: crate::objects::page_list::PageListError) -> Self {
        use crate::objects::page_list::PageListError::*;
        match e {
            BadField(at) => bad_field(at),
            BadSize(at) => bad_size(at),
            BadAddress(at) => bad_address(at),
        }
    }
}

/// Shorthands: `bad_field(OFF)`, `bad_size(OFF)`, ...
pub fn bad_field(field: usize) -> CmdError {
    CmdError::new(AqStatus::BadField, field)
}
pub fn bad_size(field: usize) -> CmdError {
    CmdError::new(AqStatus::BadSize, field)
}
pub fn bad_handle(field: usize) -> CmdError {
    CmdError::new(AqStatus::BadHandle, field)
}
pub fn bad_address(field: usize) -> CmdError {
    CmdError::new(AqStatus::BadAddress, field)
}
pub fn permission(field: usize) -> CmdError {
    CmdError::new(AqStatus::Permission, field)
}
pub fn no_resources() -> CmdError {
    CmdError::general(AqStatus::NoResources)
}
pub fn busy(field: usize) -> CmdError {
    CmdError::new(AqStatus::Busy, field)
}
