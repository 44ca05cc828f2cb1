//! A small limiter for warnings a peer can trigger (a vfio-user client's protocol
//! violations, a guest driver's mistakes), so a misbehaving peer cannot flood the log.

use std::time::{Duration, Instant};

use log::warn;

const BURST: u32 = 10;
const WINDOW: Duration = Duration::from_secs(1);

/// Allows `BURST` warnings per `WINDOW`; counts the rest and reports the
/// count when the next window opens.
#[derive(Debug)]
pub struct WarnLimiter {
    window_start: Instant,
    in_window: u32,
    suppressed: u64,
}

impl Default for WarnLimiter {
    fn default() -> Self {
        Self {
            window_start: Instant::now(),
            in_window: 0,
            suppressed: 0,
        }
    }
}

impl WarnLimiter {
    /// True if a warning may be logged now.
    pub fn allow(&mut self, who: &str) -> bool {
        let now = Instant::now();
        if now.saturating_duration_since(self.window_start) >= WINDOW {
            if self.suppressed > 0 {
                warn!("{who}: {} more warnings suppressed", self.suppressed);
            }
            self.window_start = now;
            self.in_window = 0;
            self.suppressed = 0;
        }
        if self.in_window < BURST {
            self.in_window = self.in_window.saturating_add(1);
            true
        } else {
            self.suppressed = self.suppressed.saturating_add(1);
            false
        }
    }
}

/// Logs a peer's violation through a [`WarnLimiter`].
macro_rules! client_warn {
    ($limiter:expr, $who:expr, $($arg:tt)+) => {
        if $limiter.allow($who) {
            log::warn!("{}: {}", $who, format_args!($($arg)+));
        }
    };
}
pub(crate) use client_warn;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_is_allowed_then_suppressed() {
        // A window that has not started yet never rolls over during the test.
        let mut l = WarnLimiter {
            window_start: Instant::now() + Duration::from_secs(3600),
            ..WarnLimiter::default()
        };
        let allowed = (0..BURST + 5).filter(|_| l.allow("t")).count();

        assert_eq!(allowed, BURST as usize);
        assert_eq!(l.suppressed, 5);
    }
}
