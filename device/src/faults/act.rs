//! Applying rules to a device (the layer beside `admin`): arming, raising events now through
//! the device's real paths, and running the admin commands a delay held once it is due.

use super::plan::PlanError;
use super::rule::{Event, Rule, RuleError};
use super::view::FaultsView;
use super::{fired, Firing};
use crate::datapath::Progress;
use crate::rnic::notify::post_async;
use crate::rnic::Rnic;
use std::time::Instant;
use vrnic_hw::{EventType, PORT_NUM};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultError {
    #[error(transparent)]
    Rule(#[from] RuleError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("device {device} has no QP {qpn:#x}")]
    NoQp { device: String, qpn: u32 },
    #[error("device {device} has no CQ {cqn:#x}")]
    NoCq { device: String, cqn: u32 },
    #[error("device {0} is not enabled (no driver, or already FATAL): nothing to fail")]
    NotServing(String),
}

/// What became of a rule given to a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub id: u32,
    pub rule: Rule,
    /// Armed (waits for its occurrence), or what it did at once.
    pub fired: Option<String>,
}

/// Arms `rule` on `rnic`, or carries it out now if it is an event or a stall.
pub fn apply(rnic: &Rnic, rule: Rule) -> Result<Applied, FaultError> {
    let firing = match rule {
        Rule::Event(event) => raise(rnic, rule, event)?,
        Rule::Stall(d) => {
            let what = format!("data path stalled for {} ms", d.as_millis());
            // Recorded under the device lock, under which a pass looks at `stalled` before
            // it looks for rung doorbells: each pass either found its work before this or
            // sees the stall, so no doorbell rung after this reply is served until the
            // stall ends (work a pass had already found still runs).
            let firing = {
                let _st = rnic.lock();
                rnic.faults.lock().record(rule, what, Instant::now())?
            };
            // The poller sleeps until the stall ends.
            rnic.wake();
            firing
        }
        _ => {
            let id = rnic.faults.arm(rule)?;
            return Ok(Applied {
                id,
                rule,
                fired: None,
            });
        }
    };
    fired(rnic.name(), &rnic.trace.emitter(), &firing);
    Ok(Applied {
        id: firing.id,
        rule,
        fired: Some(firing.what),
    })
}

/// Raises `event` now, the way the device itself would: the state changes first (port
/// state, QP or CQ error, FATAL), then the async event is posted.
fn raise(rnic: &Rnic, rule: Rule, event: Event) -> Result<Firing, FaultError> {
    let device = rnic.name().to_string();
    let mut st = rnic.lock();
    let now = Instant::now();
    let record = |what: String| rnic.faults.lock().record(rule, what, now);
    let firing = match event {
        Event::PortDown => {
            let f = record("port 1 reports DOWN; PORT_ERR posted".into())?;
            post_async(rnic, &mut st, EventType::PortErr, PORT_NUM, 0);
            f
        }
        Event::PortUp => {
            let f = record("port 1 reports ACTIVE; PORT_ACTIVE posted".into())?;
            post_async(rnic, &mut st, EventType::PortActive, PORT_NUM, 0);
            f
        }
        Event::QpFatal(qpn) => {
            if st.objects.qp(qpn).is_none() {
                return Err(FaultError::NoQp { device, qpn });
            }
            let f = record(format!("QP {qpn:#x} moved to ERR; QP_FATAL posted"))?;
            st.objects.qp_to_error(qpn);
            post_async(rnic, &mut st, EventType::QpFatal, qpn, 0);
            f
        }
        Event::CqErr(cqn) => {
            let Some(cq) = st.objects.cqs.get_mut(cqn) else {
                return Err(FaultError::NoCq { device, cqn });
            };
            cq.error = true;
            // As for a CQ that overflowed (SPEC "Completion queue"): its QPs move to ERR.
            let hit: Vec<u32> = st
                .objects
                .qps
                .iter()
                .filter(|(_, qp)| qp.uses_cq(cqn))
                .map(|(_, qp)| qp.qpn)
                .collect();
            let f = record(format!(
                "CQ {cqn:#x} in error, {} QPs moved to ERR; CQ_ERR posted",
                hit.len()
            ))?;
            for qpn in hit {
                st.objects.qp_to_error(qpn);
            }
            post_async(rnic, &mut st, EventType::CqErr, cqn, 0);
            f
        }
        Event::DeviceFatal(code) => {
            if !st.serving() {
                return Err(FaultError::NotServing(device));
            }
            let f = record(format!(
                "device FATAL with FATAL_CODE {}; DEVICE_FATAL posted",
                code.name()
            ))?;
            crate::admin::fatal(rnic, &mut st, code);
            f
        }
    };
    drop(st);
    if let Event::DeviceFatal(_) = event {
        rnic.faults.device_reset();
    }
    // QPs in ERR are flushed by the poller, which may be asleep.
    rnic.wake();
    Ok(firing)
}

/// Parses `text` and applies it.
pub fn apply_text(rnic: &Rnic, text: &str) -> Result<Applied, FaultError> {
    apply(rnic, Rule::parse(text)?)
}

/// Drops every rule of `rnic` (a held admin command then runs at once); how many went.
pub fn clear(rnic: &Rnic) -> usize {
    let n = rnic.faults.lock().clear(Instant::now());
    log::info!("{}: {n} fault rules cleared", rnic.name());
    rnic.wake();
    n
}

/// The plan of `rnic` as `vrnic ctl` lists it.
pub fn view(rnic: &Rnic) -> FaultsView {
    FaultsView::of(&rnic.faults.lock(), Instant::now())
}

/// Hook (the poller, before it polls `rnic`, no lock held): runs the admin commands a
/// delay held once it has passed, or says when to look again.
pub fn release_due(rnic: &Rnic, now: Instant) -> Progress {
    if !rnic.faults.hot(super::ADMIN) {
        return Progress::default();
    }
    let mut pi = match rnic.faults.lock().admin_due(now) {
        Ok(pi) => pi,
        Err(retry_at) => {
            return Progress {
                worked: false,
                retry_at,
            }
        }
    };
    log::debug!("{}: held admin command released", rnic.name());
    loop {
        crate::admin::doorbell(rnic, pi);
        match rnic.faults.lock().admin_release_more(pi) {
            Some(newer) => pi = newer,
            None => break,
        }
    }
    // New QPs or CQs may have appeared, as after any admin doorbell.
    rnic.wake();
    Progress::worked()
}
