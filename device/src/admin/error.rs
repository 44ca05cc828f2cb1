//! How an admin command fails: a status code and, where one field is at fault, its offset.

use vrnic_hw::{AqStatus, ContractRule, AQ_ERR_OFFSET_NONE};

/// A failed admin command. `field` is the byte offset of the faulty field in the command;
/// `rule` the contract rule the command broke, if the failure is one (SPEC "Contract
/// checking"), reported once the command has run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{status:?} (field at offset {field:?})")]
pub struct CmdError {
    pub status: AqStatus,
    pub field: Option<usize>,
    pub rule: Option<ContractRule>,
}

impl CmdError {
    pub fn new(status: AqStatus, field: usize) -> Self {
        CmdError {
            status,
            field: Some(field),
            rule: None,
        }
    }

    /// A failure no single field explains.
    pub fn general(status: AqStatus) -> Self {
        CmdError {
            status,
            field: None,
            rule: None,
        }
    }

    /// The same failure, as a violation of `rule`.
    pub fn breaks(self, rule: ContractRule) -> Self {
        CmdError {
            rule: Some(rule),
            ..self
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
            Reserved(at) => bad_field(at).breaks(ContractRule::CmdReservedField),
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
