//! A device's fault plan: the rules armed and fired, their counts, and the state the
//! injected faults left (a stalled data path, a held admin command, a port reported down).
//! Plain state behind `Faults`'s leaf lock; every decision is made here, so it is tested
//! without a device.

use super::rule::{Event, QpSel, Rule};
use std::thread::ThreadId;
use std::time::{Duration, Instant};
use vrnic_hw::{AqCompletion, AqOpcode, AqStatus, WcStatus, AQ_ERR_OFFSET_NONE};

/// Rules a plan keeps, armed and fired together; a fired one is dropped (oldest first) to
/// make room, an armed one never.
pub const MAX_RULES: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("{MAX_RULES} rules are armed already; clear some first")]
    Full,
}

/// A rule of the plan and what became of it.
#[derive(Debug, Clone)]
pub struct Entry {
    pub id: u32,
    pub rule: Rule,
    /// Occurrences counted so far (WQEs or commands that matched).
    pub seen: u32,
    /// `qp=new:K`: QPs created since arming, and the one bound once the K-th appeared.
    pub created: u32,
    pub bound: Option<u32>,
    /// When and on what it fired; None while armed.
    pub fired: Option<(Instant, String)>,
}

/// The admin command a delay holds back: the engine stops before it (commands complete in
/// order) and the poller runs it, and those after it, once `until` has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub index: u32,
    pub opcode: u8,
    pub until: Instant,
    /// The newest admin doorbell seen while held.
    pub pi: u32,
}

/// What the admin engine does with a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminAct {
    /// Stop before it; it runs when the delay is over.
    Hold,
    /// Complete it with this completion, without executing it.
    Fail(AqCompletion),
}

/// A rule that fired: for the log and the tracer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Firing {
    pub id: u32,
    pub rule: Rule,
    pub what: String,
}

#[derive(Debug, Default)]
pub struct Plan {
    next_id: u32,
    pub entries: Vec<Entry>,
    pub stall_until: Option<Instant>,
    pub port_down: bool,
    pub held: Option<Held>,
    /// The thread running the commands a delay released, while it does; doorbells on other
    /// threads meanwhile only record their index (`latest_pi`).
    releasing: Option<ThreadId>,
    latest_pi: u32,
    /// The command whose delay just ended: it runs, and is not counted again.
    released_index: Option<u32>,
}

impl Plan {
    /// Makes room for one more entry: drops the oldest fired one if the plan is full.
    fn room(&mut self) -> Result<(), PlanError> {
        if self.entries.len() < MAX_RULES {
            return Ok(());
        }
        let oldest = self
            .entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.fired.as_ref().map(|(at, _)| (i, *at)))
            .min_by_key(|&(_, at)| at)
            .map(|(i, _)| i)
            .ok_or(PlanError::Full)?;
        self.entries.remove(oldest);
        Ok(())
    }

    fn push(&mut self, rule: Rule, fired: Option<(Instant, String)>) -> Result<u32, PlanError> {
        self.room()?;
        self.next_id = self.next_id.wrapping_add(1);
        self.entries.push(Entry {
            id: self.next_id,
            rule,
            seen: 0,
            created: 0,
            bound: None,
            fired,
        });
        Ok(self.next_id)
    }

    /// Arms a rule that waits for its occurrence (wqe, admin).
    pub fn arm(&mut self, rule: Rule) -> Result<u32, PlanError> {
        self.push(rule, None)
    }

    /// Records a rule that acted at once (an event, a stall) as fired.
    pub fn record(&mut self, rule: Rule, what: String, now: Instant) -> Result<Firing, PlanError> {
        let id = self.push(rule, Some((now, what.clone())))?;
        if let Rule::Stall(d) = rule {
            self.stall_until = Some(now + d);
        }
        if let Rule::Event(e) = rule {
            match e {
                Event::PortDown => self.port_down = true,
                Event::PortUp => self.port_down = false,
                _ => {}
            }
        }
        Ok(Firing { id, rule, what })
    }

    /// Drops every rule, ends a stall and lets a held admin command run now. The port
    /// keeps its state (`event port_up` restores it). Returns how many rules went.
    pub fn clear(&mut self, now: Instant) -> usize {
        let n = self.entries.len();
        self.entries.clear();
        self.stall_until = None;
        if let Some(h) = self.held.as_mut() {
            h.until = now;
        }
        n
    }

    pub fn has_wqe_rules(&self) -> bool {
        self.armed().any(|e| matches!(e.rule, Rule::Wqe { .. }))
    }

    pub fn has_admin_rules(&self) -> bool {
        self.armed()
            .any(|e| matches!(e.rule, Rule::AdminDelay { .. } | Rule::AdminFail { .. }))
            || self.held.is_some()
            || self.releasing.is_some()
    }

    fn armed(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| e.fired.is_none())
    }

    /// QP `qpn` was created: `qp=new:K` rules count it and bind to their K-th.
    pub fn qp_created(&mut self, qpn: u32) {
        for e in self.entries.iter_mut().filter(|e| e.fired.is_none()) {
            if let Rule::Wqe {
                qp: QpSel::Created(k),
                ..
            } = e.rule
            {
                if e.bound.is_none() {
                    e.created += 1;
                    if e.created == k {
                        e.bound = Some(qpn);
                    }
                }
            }
        }
    }

    /// The send WQE at queue index `index` of QP `qpn` is about to run for the first time
    /// (`fresh`; a later chunk or retry of the same WQE is not counted): the status it
    /// fails with, if a rule fires on it.
    pub fn wqe(&mut self, qpn: u32, index: u32, now: Instant) -> Option<(Firing, WcStatus)> {
        let counts = |e: &Entry| match e.rule {
            Rule::Wqe { qp, .. } => match qp {
                QpSel::Any => true,
                QpSel::Qpn(n) => n == qpn,
                QpSel::Created(_) => e.bound == Some(qpn),
            },
            _ => false,
        };
        let e = self.count(counts)?;
        let Rule::Wqe { nth, status, .. } = e.rule else {
            return None;
        };
        let what = format!(
            "QP {qpn:#x} send WQE {nth} (queue index {index}) completed with {}",
            status.name()
        );
        e.fired = Some((now, what.clone()));
        Some((
            Firing {
                id: e.id,
                rule: e.rule,
                what,
            },
            status,
        ))
    }

    /// Counts an occurrence for the armed rules `matches` accepts; the one it completes
    /// (the first, if several would), which fires. An occurrence a rule fired on is not
    /// counted by the others: each fault is injected into an occurrence of its own.
    fn count(&mut self, matches: impl Fn(&Entry) -> bool) -> Option<&mut Entry> {
        let nth = |e: &Entry| match e.rule {
            Rule::Wqe { nth, .. } | Rule::AdminDelay { nth, .. } | Rule::AdminFail { nth, .. } => {
                nth
            }
            _ => 0,
        };
        let armed = |e: &Entry| e.fired.is_none() && matches(e);
        match self
            .entries
            .iter()
            .position(|e| armed(e) && e.seen.saturating_add(1) == nth(e))
        {
            Some(i) => {
                let e = &mut self.entries[i];
                e.seen += 1;
                Some(e)
            }
            None => {
                for e in self.entries.iter_mut().filter(|e| armed(e)) {
                    e.seen = e.seen.saturating_add(1);
                }
                None
            }
        }
    }

    /// An admin doorbell with producer index `pi` on this thread: false to run the engine,
    /// true if a held or released command owns it now (the index is recorded; the
    /// releasing thread runs the commands up to it).
    pub fn admin_gate(&mut self, pi: u32) -> bool {
        let me = std::thread::current().id();
        if self.held.is_some() || self.releasing.is_some_and(|t| t != me) {
            self.latest_pi = pi;
            if let Some(h) = self.held.as_mut() {
                h.pi = pi;
            }
            return true;
        }
        false
    }

    /// The admin command at queue index `index` (header `opcode`, `cmd_id`) is next: what a
    /// rule does to it, if one fires.
    pub fn admin_command(
        &mut self,
        index: u32,
        opcode: u8,
        cmd_id: u32,
        pi: u32,
        now: Instant,
    ) -> Option<(Firing, AdminAct)> {
        if self.released_index.take() == Some(index) {
            return None;
        }
        let name = AqOpcode::try_from(opcode).map_or("an unknown opcode", AqOpcode::name);
        let e = self.count(|e| match e.rule {
            Rule::AdminDelay { op, .. } | Rule::AdminFail { op, .. } => {
                op.is_none_or(|op| u8::from(op) == opcode)
            }
            _ => false,
        })?;
        let (what, act, held) = match e.rule {
            Rule::AdminDelay { delay, .. } => (
                format!(
                    "admin {name} (cmd_id {cmd_id}, queue index {index}) held for {} ms",
                    delay.as_millis()
                ),
                AdminAct::Hold,
                Some(Held {
                    index,
                    opcode,
                    until: now + delay,
                    pi,
                }),
            ),
            Rule::AdminFail { status, .. } => (
                format!(
                    "admin {name} (cmd_id {cmd_id}, queue index {index}) failed with {}",
                    status.name()
                ),
                AdminAct::Fail(failed(cmd_id, opcode, status)),
                None,
            ),
            _ => return None,
        };
        e.fired = Some((now, what.clone()));
        let firing = Firing {
            id: e.id,
            rule: e.rule,
            what,
        };
        if held.is_some() {
            self.held = held;
        }
        Some((firing, act))
    }

    /// The poller's look: the doorbell index to run now if a held command's delay has
    /// passed (this thread then releases), or when to look again.
    pub fn admin_due(&mut self, now: Instant) -> Result<u32, Option<Instant>> {
        let Some(held) = self.held else {
            return Err(None);
        };
        if now < held.until {
            return Err(Some(held.until));
        }
        self.held = None;
        self.released_index = Some(held.index);
        self.releasing = Some(std::thread::current().id());
        self.latest_pi = held.pi;
        Ok(held.pi)
    }

    /// The releasing thread ran the commands up to `pi`: the newer index to run next, or
    /// None when it is done (nothing newer, or a new delay holds the engine again).
    pub fn admin_release_more(&mut self, pi: u32) -> Option<u32> {
        if self.held.is_none() && self.latest_pi != pi {
            return Some(self.latest_pi);
        }
        self.releasing = None;
        self.released_index = None;
        None
    }

    /// The device was reset (or failed): a held command is gone with its queue.
    pub fn device_reset(&mut self) -> Option<Held> {
        self.released_index = None;
        self.held.take()
    }

    /// The data path is stalled until the instant returned; None once it runs again.
    pub fn stalled(&mut self, now: Instant) -> Option<Instant> {
        match self.stall_until {
            Some(until) if now < until => Some(until),
            _ => {
                self.stall_until = None;
                None
            }
        }
    }

    /// Time left of a stall or a held command, for listings.
    pub fn left(until: Option<Instant>, now: Instant) -> Option<Duration> {
        until.map(|u| u.saturating_duration_since(now))
    }
}

/// The completion of a command failed by a rule: the status, no result, no err_offset.
fn failed(cmd_id: u32, opcode: u8, status: AqStatus) -> AqCompletion {
    AqCompletion {
        cmd_id: cmd_id.into(),
        opcode,
        status: status.into(),
        err_offset: (AQ_ERR_OFFSET_NONE as u16).into(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(t: &str) -> Rule {
        Rule::parse(t).unwrap()
    }

    #[test]
    fn the_nth_fresh_wqe_of_the_named_qp_fails_and_no_other() {
        let mut p = Plan::default();
        let now = Instant::now();
        p.arm(rule("wqe qp=0x12 nth=3 status=REM_ACCESS_ERR"))
            .unwrap();
        assert!(p.wqe(0x12, 0, now).is_none());
        assert!(p.wqe(0x13, 0, now).is_none(), "another QP does not count");
        assert!(p.wqe(0x12, 1, now).is_none());
        let (fired, status) = p.wqe(0x12, 2, now).unwrap();
        assert_eq!(status, WcStatus::RemAccessErr);
        assert!(fired.what.contains("queue index 2"), "{}", fired.what);
        assert!(p.wqe(0x12, 3, now).is_none(), "a rule fires once");
        assert!(!p.has_wqe_rules());
    }

    #[test]
    fn two_rules_due_on_one_wqe_fail_two_wqes() {
        let mut p = Plan::default();
        let now = Instant::now();
        p.arm(rule("wqe nth=2 status=LOC_PROT_ERR")).unwrap();
        p.arm(rule("wqe nth=2 status=FATAL_ERR")).unwrap();
        assert!(p.wqe(1, 0, now).is_none());
        assert_eq!(p.wqe(1, 1, now).map(|h| h.1), Some(WcStatus::LocProtErr));
        assert_eq!(p.wqe(1, 2, now).map(|h| h.1), Some(WcStatus::FatalErr));
        assert!(p.wqe(1, 3, now).is_none());
    }

    #[test]
    fn a_new_qp_rule_binds_to_the_kth_qp_created_after_it() {
        let mut p = Plan::default();
        let now = Instant::now();
        p.arm(rule("wqe qp=new:2 nth=1 status=FATAL_ERR")).unwrap();
        p.qp_created(0x100);
        assert!(
            p.wqe(0x100, 0, now).is_none(),
            "the first QP is not the second"
        );
        p.qp_created(0x200);
        p.qp_created(0x300);
        assert!(p.wqe(0x300, 0, now).is_none());
        assert_eq!(p.wqe(0x200, 0, now).map(|h| h.1), Some(WcStatus::FatalErr));
    }

    #[test]
    fn admin_rules_count_their_opcode_and_a_delay_holds_the_engine_until_due() {
        let mut p = Plan::default();
        let t0 = Instant::now();
        let create_cq = u8::from(AqOpcode::CreateCq);
        let alloc_pd = u8::from(AqOpcode::AllocPd);
        p.arm(rule("admin delay op=CREATE_CQ nth=2 ms=100"))
            .unwrap();
        p.arm(rule("admin fail op=ALLOC_PD status=BUSY")).unwrap();
        assert!(p.admin_command(0, create_cq, 1, 1, t0).is_none());
        let (_, act) = p.admin_command(1, alloc_pd, 2, 2, t0).unwrap();
        let AdminAct::Fail(c) = act else {
            panic!("{act:?}")
        };
        assert_eq!(
            (c.status, c.cmd_id.to_native(), c.opcode),
            (u8::from(AqStatus::Busy), 2, alloc_pd)
        );
        let (_, act) = p.admin_command(2, create_cq, 3, 3, t0).unwrap();
        assert_eq!(act, AdminAct::Hold);
        // Later doorbells are recorded, not run, while it is held.
        assert!(p.admin_gate(4));
        assert_eq!(p.admin_due(t0), Err(Some(t0 + Duration::from_millis(100))));
        let due = t0 + Duration::from_millis(100);
        assert_eq!(p.admin_due(due), Ok(4));
        // The releasing thread runs it, uncounted; the others still only record.
        assert!(!p.admin_gate(4));
        assert!(p.admin_command(2, create_cq, 3, 4, due).is_none());
        assert_eq!(p.admin_release_more(4), None);
        assert!(!p.has_admin_rules());
    }

    #[test]
    fn a_reset_forgets_the_held_command_and_clear_releases_it_at_once() {
        let mut p = Plan::default();
        let t0 = Instant::now();
        p.arm(rule("admin delay ms=60000")).unwrap();
        p.admin_command(5, 1, 9, 6, t0).unwrap();
        assert_eq!(p.device_reset().map(|h| h.index), Some(5));
        assert!(!p.admin_gate(1), "a reset device runs its new commands");
        p.arm(rule("admin delay ms=60000")).unwrap();
        p.admin_command(0, 1, 1, 1, t0).unwrap();
        assert_eq!(p.clear(t0), 2);
        assert_eq!(p.admin_due(t0), Ok(1));
    }

    #[test]
    fn a_stall_ends_by_itself_and_events_change_the_port_state() {
        let mut p = Plan::default();
        let t0 = Instant::now();
        p.record(rule("stall ms=50"), "stalled".into(), t0).unwrap();
        assert_eq!(p.stalled(t0), Some(t0 + Duration::from_millis(50)));
        assert_eq!(p.stalled(t0 + Duration::from_millis(50)), None);
        p.record(rule("event port_down"), "down".into(), t0)
            .unwrap();
        assert!(p.port_down);
        p.record(rule("event port_up"), "up".into(), t0).unwrap();
        assert!(!p.port_down);
    }

    #[test]
    fn a_full_plan_drops_its_oldest_fired_rule_but_never_an_armed_one() {
        let mut p = Plan::default();
        let t0 = Instant::now();
        p.record(rule("event port_up"), "first".into(), t0).unwrap();
        for _ in 1..MAX_RULES {
            p.arm(rule("wqe status=FATAL_ERR")).unwrap();
        }
        p.arm(rule("wqe status=GENERAL_ERR")).unwrap();
        assert_eq!(p.entries.len(), MAX_RULES);
        assert!(p.entries.iter().all(|e| e.fired.is_none()));
        assert_eq!(p.arm(rule("wqe status=GENERAL_ERR")), Err(PlanError::Full));
    }
}
