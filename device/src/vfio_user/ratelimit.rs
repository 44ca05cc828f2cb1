//! The server's warnings go through the crate's limiter.

pub(crate) use crate::ratelimit::{client_warn, WarnLimiter};
