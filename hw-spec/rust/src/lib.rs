//! vrnic hardware interface.
