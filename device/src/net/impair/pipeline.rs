//! One direction of an uplink's impairment: the rules that apply to it, in order, each
//! with its own frame count and generator, and the frames held by `delay` and `reorder`.
//!
//! Nothing here sleeps or blocks: a held frame is released by `release_due`, which the
//! uplink's thread calls when `next_deadline` comes, or by the frames that go out after
//! it (`reorder`).

use super::spec::{Action, Dir, Rule, Spec};
use crate::rng::Rng;
use std::borrow::Cow;
use std::time::{Duration, Instant};

/// Most frames, and bytes, one direction holds at once; beyond either a frame to hold is
/// dropped (counted).
pub const MAX_HELD: usize = 1024;
pub const MAX_HELD_BYTES: usize = 16 << 20;
/// Most frames one frame may become through `dup` rules (16 rules of 8 copies would
/// otherwise make 9^16); copies beyond it are dropped (counted).
pub const MAX_FANOUT: u32 = 64;

/// What one rule did in one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuleCounts {
    /// Frames it counted (of its direction and match, let through by the rules before it).
    pub seen: u64,
    /// Frames it acted on: lost, duplicated, held, corrupted.
    pub applied: u64,
    /// `corrupt`: frames picked but too short for its offset (passed unchanged).
    pub short: u64,
}

struct Instance {
    rule: Rule,
    /// The rule's position in its spec (from 0).
    index: usize,
    rng: Rng,
    counts: RuleCounts,
}

struct Held {
    frame: Vec<u8>,
    /// Released at this time at the latest.
    deadline: Instant,
    /// `reorder`: released once this many frames have gone out in all.
    after: Option<u64>,
}

/// A direction's rules and held frames.
pub struct Pipeline {
    dir: Dir,
    rules: Vec<Instance>,
    /// In the order held (a release looks for the earliest deadline).
    held: Vec<Held>,
    held_bytes: usize,
    /// Frames this direction let out, in all.
    sent: u64,
    /// Frames dropped because `MAX_HELD` frames (or `MAX_HELD_BYTES`) were held already,
    /// or beyond `MAX_FANOUT`.
    overflow: u64,
}

impl Pipeline {
    /// The rules of `spec` that apply to `dir` (Egress or Ingress), fresh counts.
    pub fn new(spec: &Spec, dir: Dir) -> Pipeline {
        let rules = spec
            .rules
            .iter()
            .enumerate()
            .filter(|(_, r)| r.dir.includes(dir))
            .map(|(index, rule)| Instance {
                rule: rule.clone(),
                index,
                rng: Rng::new(spec.seed(index)),
                counts: RuleCounts::default(),
            })
            .collect();
        Pipeline {
            dir,
            rules,
            held: Vec::new(),
            held_bytes: 0,
            sent: 0,
            overflow: 0,
        }
    }

    pub fn dir(&self) -> Dir {
        self.dir
    }

    /// Each rule's position in the spec and its counts.
    pub fn counts(&self) -> impl Iterator<Item = (usize, RuleCounts)> + '_ {
        self.rules.iter().map(|i| (i.index, i.counts))
    }

    pub fn held(&self) -> usize {
        self.held.len()
    }

    pub fn overflow(&self) -> u64 {
        self.overflow
    }

    /// The earliest deadline of a held frame.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.held.iter().map(|h| h.deadline).min()
    }

    /// Takes one frame: `out` gets what leaves now (none, it, copies, held frames it lets
    /// go); the rest is held. Returns whether a frame was held (the caller's timer may
    /// need to wake earlier).
    pub fn process(&mut self, frame: &[u8], now: Instant, out: &mut dyn FnMut(&[u8])) -> bool {
        let before = self.held.len();
        let mut fanout = MAX_FANOUT;
        self.run(Cow::Borrowed(frame), 0, now, out, &mut fanout);
        self.held.len() > before
    }

    /// `frame` through rules `first..`; `fanout` is what is left of the copies it may make.
    fn run(
        &mut self,
        mut frame: Cow<[u8]>,
        first: usize,
        now: Instant,
        out: &mut dyn FnMut(&[u8]),
        fanout: &mut u32,
    ) {
        for i in first..self.rules.len() {
            let inst = &mut self.rules[i];
            if !inst.rule.matches.takes(&frame) {
                continue;
            }
            inst.counts.seen += 1;
            if !inst.rule.picks(inst.counts.seen, &mut inst.rng) {
                continue;
            }
            inst.counts.applied += 1;
            match inst.rule.action {
                Action::Loss => return,
                Action::Corrupt { offset, bit } => {
                    let at = match offset {
                        Some(o) => o as usize,
                        None => inst.rng.below(frame.len() as u64) as usize,
                    };
                    let bit = bit.unwrap_or_else(|| inst.rng.below(8) as u8);
                    match frame.to_mut().get_mut(at) {
                        Some(byte) => *byte ^= 1 << bit,
                        None => {
                            inst.counts.applied -= 1;
                            inst.counts.short += 1;
                        }
                    }
                }
                Action::Dup { copies } => {
                    self.run(frame.clone(), i + 1, now, out, fanout);
                    for _ in 0..copies {
                        if *fanout == 0 {
                            self.overflow += 1;
                            continue;
                        }
                        *fanout -= 1;
                        self.run(frame.clone(), i + 1, now, out, fanout);
                    }
                    return;
                }
                Action::Delay { ms } => {
                    self.hold(frame, now + Duration::from_millis(ms.into()), None);
                    return;
                }
                Action::Reorder { by, ms } => {
                    let after = Some(self.sent + u64::from(by));
                    self.hold(frame, now + Duration::from_millis(ms.into()), after);
                    return;
                }
            }
        }
        self.send(&frame, out);
    }

    fn take(&mut self, at: usize) -> Held {
        let h = self.held.remove(at);
        self.held_bytes -= h.frame.len();
        h
    }

    fn hold(&mut self, frame: Cow<[u8]>, deadline: Instant, after: Option<u64>) {
        if self.held.len() >= MAX_HELD || self.held_bytes + frame.len() > MAX_HELD_BYTES {
            self.overflow += 1;
            return;
        }
        self.held_bytes += frame.len();
        self.held.push(Held {
            frame: frame.into_owned(),
            deadline,
            after,
        });
    }

    /// `frame` leaves; then the reordered frames it was the last one for.
    fn send(&mut self, frame: &[u8], out: &mut dyn FnMut(&[u8])) {
        out(frame);
        self.sent += 1;
        while let Some(at) = self
            .held
            .iter()
            .position(|h| h.after.is_some_and(|n| n <= self.sent))
        {
            let h = self.take(at);
            self.send(&h.frame, out);
        }
    }

    /// Lets out the held frames whose deadline is `now` or earlier, earliest first.
    pub fn release_due(&mut self, now: Instant, out: &mut dyn FnMut(&[u8])) {
        while let Some((at, _)) = self
            .held
            .iter()
            .enumerate()
            .filter(|(_, h)| h.deadline <= now)
            .min_by_key(|(i, h)| (h.deadline, *i))
        {
            let h = self.take(at);
            self.send(&h.frame, out);
        }
    }

    /// Lets out every held frame, in the order of their deadlines (switching off).
    pub fn flush(&mut self, out: &mut dyn FnMut(&[u8])) {
        if let Some(last) = self.held.iter().map(|h| h.deadline).max() {
            self.release_due(last, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames 1..=n, each a 16-byte frame whose first byte is its number.
    fn frames(n: u8) -> Vec<Vec<u8>> {
        (1..=n).map(|i| vec![i; 16]).collect()
    }

    /// The first bytes of what leaves for `n` frames sent at `now`, then after every
    /// deadline.
    fn run(spec: &str, dir: Dir, n: u8) -> (Vec<u8>, Pipeline) {
        let spec = Spec::parse(spec).unwrap();
        let mut p = Pipeline::new(&spec, dir);
        let mut got = Vec::new();
        let now = Instant::now();
        for f in frames(n) {
            p.process(&f, now, &mut |f| got.push(f[0]));
        }
        p.release_due(now + Duration::from_secs(11), &mut |f| got.push(f[0]));
        assert_eq!(p.held(), 0);
        (got, p)
    }

    #[test]
    fn loss_by_pattern_drops_exactly_the_frames_named() {
        let (got, p) = run("loss every=4 from=2", Dir::Egress, 12);
        assert_eq!(got, [1, 3, 4, 5, 7, 8, 9, 11, 12]);
        let counts: Vec<_> = p.counts().collect();
        assert_eq!(counts[0].1.seen, 12);
        assert_eq!(counts[0].1.applied, 3);
        let (got, _) = run("loss frames=1/5-6", Dir::Ingress, 7);
        assert_eq!(got, [2, 3, 4, 7]);
    }

    #[test]
    fn a_rule_applies_only_to_its_direction() {
        let (got, p) = run("loss every=1 dir=ingress", Dir::Egress, 3);
        assert_eq!(got, [1, 2, 3]);
        assert_eq!(p.counts().count(), 0);
        let (got, _) = run("loss every=1 dir=egress", Dir::Egress, 3);
        assert!(got.is_empty());
    }

    #[test]
    fn dup_sends_copies_that_later_rules_count() {
        let (got, _) = run("dup frames=2 copies=2", Dir::Egress, 3);
        assert_eq!(got, [1, 2, 2, 2, 3]);
        // Frame 2's copy is frame 3 for the loss rule.
        let (got, p) = run("dup frames=2; loss frames=3", Dir::Egress, 3);
        assert_eq!(got, [1, 2, 3]);
        let counts: Vec<_> = p.counts().map(|(_, c)| c).collect();
        assert_eq!((counts[1].seen, counts[1].applied), (4, 1));
    }

    #[test]
    fn reorder_lets_a_frame_go_after_the_next_ones_or_at_its_deadline() {
        let (got, _) = run("reorder frames=2 by=2", Dir::Egress, 6);
        assert_eq!(got, [1, 3, 4, 2, 5, 6]);
        // The last frame has nothing after it: it leaves at its deadline.
        let spec = Spec::parse("reorder frames=3 ms=5").unwrap();
        let mut p = Pipeline::new(&spec, Dir::Egress);
        let now = Instant::now();
        let mut got = Vec::new();
        for f in frames(3) {
            assert_eq!(p.process(&f, now, &mut |f| got.push(f[0])), f[0] == 3);
        }
        assert_eq!((got.as_slice(), p.held()), (&[1u8, 2][..], 1));
        assert_eq!(p.next_deadline(), Some(now + Duration::from_millis(5)));
        p.release_due(now + Duration::from_millis(4), &mut |f| got.push(f[0]));
        assert_eq!(got, [1, 2]);
        p.release_due(now + Duration::from_millis(5), &mut |f| got.push(f[0]));
        assert_eq!(got, [1, 2, 3]);
    }

    #[test]
    fn delay_holds_frames_and_keeps_their_order() {
        let spec = Spec::parse("delay every=2 ms=10").unwrap();
        let mut p = Pipeline::new(&spec, Dir::Ingress);
        let t0 = Instant::now();
        let mut got = Vec::new();
        for (i, f) in frames(5).iter().enumerate() {
            let now = t0 + Duration::from_millis(i as u64);
            p.process(f, now, &mut |f| got.push(f[0]));
        }
        assert_eq!(got, [1, 3, 5]);
        assert_eq!(p.next_deadline(), Some(t0 + Duration::from_millis(11)));
        p.release_due(t0 + Duration::from_millis(11), &mut |f| got.push(f[0]));
        assert_eq!(got, [1, 3, 5, 2]);
        p.release_due(t0 + Duration::from_millis(13), &mut |f| got.push(f[0]));
        assert_eq!(got, [1, 3, 5, 2, 4]);
        assert_eq!(p.next_deadline(), None);
    }

    #[test]
    fn corrupt_flips_one_bit_where_told_and_counts_short_frames() {
        let spec = Spec::parse("corrupt every=1 offset=3 bit=6").unwrap();
        let mut p = Pipeline::new(&spec, Dir::Egress);
        let mut got = Vec::new();
        let now = Instant::now();
        p.process(&[0u8; 8], now, &mut |f| got.push(f.to_vec()));
        p.process(&[0u8; 3], now, &mut |f| got.push(f.to_vec()));
        assert_eq!(got[0], [0, 0, 0, 0x40, 0, 0, 0, 0]);
        assert_eq!(got[1], [0, 0, 0], "too short: unchanged");
        let c = p.counts().next().unwrap().1;
        assert_eq!((c.seen, c.applied, c.short), (2, 1, 1));
        // Drawn from the seed: exactly one bit differs.
        let spec = Spec::parse("corrupt every=1 seed=9").unwrap();
        let mut p = Pipeline::new(&spec, Dir::Egress);
        let mut flipped = 0;
        p.process(&[0u8; 64], now, &mut |f| {
            flipped = f.iter().map(|b| b.count_ones()).sum::<u32>()
        });
        assert_eq!(flipped, 1);
    }

    #[test]
    fn the_same_seed_gives_the_same_result_and_another_seed_another() {
        let spec = "loss rate=10%; dup rate=10%; corrupt rate=10%; reorder rate=10% by=2";
        let outcome = |spec: &str| -> Vec<Vec<u8>> {
            let spec = Spec::parse(spec).unwrap();
            let mut p = Pipeline::new(&spec, Dir::Egress);
            let now = Instant::now();
            let mut got = Vec::new();
            for i in 0..2000u32 {
                let f: Vec<u8> = (0..64).map(|j| (i as u8).wrapping_add(j)).collect();
                p.process(&f, now, &mut |f| got.push(f.to_vec()));
            }
            p.flush(&mut |f| got.push(f.to_vec()));
            got
        };
        let a = outcome(spec);
        assert_eq!(a, outcome(spec));
        assert_ne!(a, outcome(&format!("{spec} seed=99")));
        // About 10% lost (1800 +- 120), then about 10% of those duplicated.
        assert!((1800..2100).contains(&a.len()), "{}", a.len());
    }

    #[test]
    fn roce_only_rules_leave_other_frames_alone_and_uncounted() {
        let mut roce = vec![0u8; 12];
        roce.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17]);
        roce.extend_from_slice(&[0; 10]);
        roce.extend_from_slice(&[0x12, 0xb7, 0x12, 0xb7, 0, 8, 0, 0]);
        let other = vec![0u8; 60];
        let spec = Spec::parse("loss every=1 match=roce").unwrap();
        let mut p = Pipeline::new(&spec, Dir::Egress);
        let mut got = 0;
        for f in [&roce, &other, &roce, &other] {
            p.process(f, Instant::now(), &mut |_| got += 1);
        }
        assert_eq!(got, 2);
        assert_eq!(p.counts().next().unwrap().1.seen, 2);
    }

    #[test]
    fn held_frames_beyond_the_cap_are_dropped_and_counted() {
        let spec = Spec::parse("delay every=1 ms=100").unwrap();
        let mut p = Pipeline::new(&spec, Dir::Egress);
        let now = Instant::now();
        for _ in 0..MAX_HELD + 5 {
            p.process(&[1; 20], now, &mut |_| {
                panic!("nothing leaves before the deadline")
            });
        }
        assert_eq!((p.held(), p.overflow()), (MAX_HELD, 5));
        let mut n = 0;
        p.flush(&mut |_| n += 1);
        assert_eq!((n, p.held(), p.held_bytes), (MAX_HELD, 0, 0));
        // And beyond the byte cap.
        let big = vec![0u8; 60_000];
        for _ in 0..MAX_HELD {
            p.process(&big, now, &mut |_| {});
        }
        assert_eq!(p.held(), MAX_HELD_BYTES / 60_000);
        assert_eq!(
            p.overflow(),
            5 + (MAX_HELD - MAX_HELD_BYTES / 60_000) as u64
        );
    }

    #[test]
    fn duplication_is_bounded_however_many_rules_multiply_it() {
        let spec = vec!["dup every=1 copies=8"; 16].join(";");
        let (got, p) = run(&spec, Dir::Egress, 2);
        assert_eq!(got.len(), 2 * (1 + MAX_FANOUT as usize));
        assert!(p.overflow() > 0);
    }
}
