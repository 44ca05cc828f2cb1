//! vrnic device backend.
