//! Fuzz input: a byte string read as a sequence of structured choices, and the seeded
//! generator and mutator the stable runner feeds the targets with.
//!
//! Every target decodes its input with [`Input`]: each read takes the next bytes, and past the
//! end every read returns zero, so any byte string is a valid input and a longer one simply
//! does more. The decoders pick valid values most of the time ([`Input::mostly`]) and a
//! mutated one otherwise, so coverage-guided byte mutation (cargo-fuzz) and random bytes
//! (the seeded runner) both reach deep paths with well-formed framing.

/// A reader of structured choices from fuzz bytes.
pub struct Input<'a> {
    data: &'a [u8],
    pos: usize,
    /// How often fields are mutated, chosen by the first byte: 0 calm (1/64), 1 and 2
    /// normal (1/8), 3 wild (1/2). Calm inputs keep objects alive long enough to reach
    /// the paths behind many valid steps; wild ones hammer the validation.
    level: u8,
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        let mut inp = Input {
            data,
            pos: 0,
            level: 1,
        };
        inp.level = inp.u8() % 4;
        inp
    }

    /// True when a mutation with base probability `percent`/100 should happen at this
    /// input's level.
    pub fn mutate(&mut self, percent: u8) -> bool {
        let p = match self.level {
            0 => percent / 8,
            3 => percent.saturating_mul(4).min(100),
            _ => percent,
        };
        self.chance(p)
    }

    /// True once every byte has been read (reads then return zeros).
    pub fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    /// The next `n` bytes (fewer, possibly none, at the end of the input).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let start = self.pos.min(self.data.len());
        let end = start.saturating_add(n).min(self.data.len());
        self.pos = self.pos.saturating_add(n);
        &self.data[start..end]
    }

    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let b = self.bytes(N);
        out[..b.len()].copy_from_slice(b);
        out
    }

    pub fn u8(&mut self) -> u8 {
        self.array::<1>()[0]
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }

    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }

    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    /// A value in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        match n {
            0 | 1 => 0,
            2..=256 => usize::from(self.u8()) % n,
            _ => usize::from(self.u16()) % n,
        }
    }

    /// True with probability about `percent`/100.
    pub fn chance(&mut self, percent: u8) -> bool {
        usize::from(self.u8()) * 100 < usize::from(percent) * 256
    }

    /// One of `items` (the first when the input is exhausted).
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    /// `valid` most of the time; otherwise a mutation of it: a flipped bit, a neighbour,
    /// zero, all ones or random bits. The mutations are what reach the error paths.
    pub fn mostly(&mut self, valid: u64, bits: u32) -> u64 {
        let mask = if bits >= 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        let selector = self.u8();
        let keep = [252, 224, 224, 128][usize::from(self.level & 3)];
        if selector < keep {
            return valid;
        }
        let v = match selector {
            0..=223 => valid ^ 1,
            224..=231 => valid ^ (1u64 << (u32::from(self.u8()) % bits.max(1))),
            232..=237 => valid.wrapping_add(1),
            238..=243 => valid.wrapping_sub(1),
            244..=246 => 0,
            247..=249 => u64::MAX,
            _ => self.u64(),
        };
        v & mask
    }

    pub fn mostly_u8(&mut self, valid: u8) -> u8 {
        self.mostly(u64::from(valid), 8) as u8
    }

    /// `mostly_u8` of a valid value drawn below `n` (at most 256).
    pub fn mostly_u8_below(&mut self, n: usize) -> u8 {
        let valid = self.below(n) as u8;
        self.mostly_u8(valid)
    }

    pub fn mostly_u16(&mut self, valid: u16) -> u16 {
        self.mostly(u64::from(valid), 16) as u16
    }

    pub fn mostly_u32(&mut self, valid: u32) -> u32 {
        self.mostly(u64::from(valid), 32) as u32
    }

    pub fn mostly_u64(&mut self, valid: u64) -> u64 {
        self.mostly(valid, 64)
    }

    /// A length biased to the interesting small values and the edges of `max`.
    pub fn len_up_to(&mut self, max: u64) -> u64 {
        match self.u8() % 8 {
            0 => 0,
            1 => max.min(1),
            2 => max,
            3 => max.saturating_sub(1),
            4 | 5 => u64::from(self.u8()) % max.saturating_add(1),
            _ => u64::from(self.u32()) % max.saturating_add(1),
        }
    }
}

/// A small seeded generator (SplitMix64): the stable runner's source of inputs.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    pub fn fill(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.fill(&mut v);
        v
    }
}

/// The `index`-th generated input of the run with `seed`: fresh random bytes, or (when there
/// is a corpus) a mutation of a corpus entry. The same (seed, index) always gives the same
/// bytes, so a finding is reproducible from the pair.
pub fn generate(seed: u64, index: u64, corpus: &[Vec<u8>], max_len: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03));
    if corpus.is_empty() || rng.below(3) == 0 {
        let len = 1 + rng.below(max_len);
        return rng.bytes(len);
    }
    let mut v = corpus[rng.below(corpus.len())].clone();
    let rounds = 1 + rng.below(8);
    for _ in 0..rounds {
        mutate(&mut rng, &mut v, corpus, max_len);
    }
    v
}

/// One byte-level mutation: flip, set, insert, delete, duplicate, or splice with another
/// corpus entry.
fn mutate(rng: &mut Rng, v: &mut Vec<u8>, corpus: &[Vec<u8>], max_len: usize) {
    if v.is_empty() {
        let n = 1 + rng.below(64);
        v.extend(rng.bytes(n));
        return;
    }
    let at = rng.below(v.len());
    match rng.below(7) {
        0 => v[at] ^= 1 << rng.below(8),
        1 => v[at] = rng.next_u64() as u8,
        2 => {
            let n = 1 + rng.below(16);
            let b = rng.bytes(n);
            v.splice(at..at, b);
        }
        3 => {
            let n = (1 + rng.below(16)).min(v.len() - at);
            v.drain(at..at + n);
        }
        4 => {
            let n = (1 + rng.below(32)).min(v.len() - at);
            let b = v[at..at + n].to_vec();
            v.splice(at..at, b);
        }
        5 => {
            let other = &corpus[rng.below(corpus.len())];
            if !other.is_empty() {
                let from = rng.below(other.len());
                let n = (1 + rng.below(64)).min(other.len() - from);
                v.splice(at..at, other[from..from + n].iter().copied());
            }
        }
        _ => {
            let b = [0u8, 0xff, 0x7f, 0x80][rng.below(4)];
            v[at] = b;
        }
    }
    v.truncate(max_len);
}
