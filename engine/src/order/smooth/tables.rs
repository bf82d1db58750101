//! The tables the many-member path keeps: when tickets fall due ([`DueClock`]), the slack
//! of every step ([`Deadlines`]) and the credit of members in a Fenwick tree
//! ([`CreditTree`]).

/// When a member's next ticket falls due, `⌈j·B/c⌉` for its j-th, stepped without
/// division: `j·B = whole·c + part` with `0 ≤ part < c`.
#[derive(Debug, Clone, Copy)]
pub(super) struct DueClock {
    pub(super) whole: i64,
    pub(super) part: i64,
    pub(super) step_whole: i64,
    pub(super) step_part: i64,
    pub(super) count: i64,
}

impl DueClock {
    /// The clock of a member's first ticket.
    pub(super) fn new(count: i64, b: i64) -> Self {
        let (step_whole, step_part) = (b / count, b % count);
        DueClock { whole: step_whole, part: step_part, step_whole, step_part, count }
    }

    /// The 1-based step by which the current ticket must have been handed out.
    pub(super) fn due(&self) -> i64 {
        self.whole + i64::from(self.part > 0)
    }

    /// `⌊j·B/c⌋`: from this step on (0-based) the member's credit is positive while it
    /// has been handed `j` tickets.
    pub(super) fn whole_steps(&self) -> i64 {
        self.whole
    }

    /// Moves on to the next ticket.
    pub(super) fn advance(&mut self) {
        self.part += self.step_part;
        let carry = self.part >= self.count;
        self.part -= self.count & -i64::from(carry);
        self.whole += self.step_whole + i64::from(carry);
    }
}

/// Slack per absolute step and the first step where it runs out (see the module docs).
pub(super) struct Deadlines {
    /// `slack[T] = G(T) − A(T)`, valid for every `T` after the current step; `i32`
    /// halves the memory traffic of the range updates (|slack| ≤ batch < 2³¹).
    pub(super) slack: Vec<i32>,
    /// Every step up to here (from the next on) has an early ticket falling due after it.
    covered: usize,
    /// The smallest tight step known; stale once passed, `usize::MAX` if none.
    first_tight: usize,
}

impl Deadlines {
    pub(super) fn new(weight: &[i64]) -> Self {
        let b: i64 = weight.iter().sum();
        assert!(b <= i64::from(i32::MAX), "a batch of {b} tickets is beyond any batch size");
        // Tickets falling due at each step, then G(T) = T − (tickets due by T).
        let mut slack = vec![0i32; b as usize + 1];
        for &c in weight {
            let mut clock = DueClock::new(c, b);
            for _ in 0..c {
                slack[clock.due() as usize] += 1;
                clock.advance();
            }
        }
        let mut due_so_far = 0;
        for (t, s) in slack.iter_mut().enumerate() {
            due_so_far += *s;
            *s = t as i32 - due_so_far;
        }
        Deadlines { slack, covered: 0, first_tight: usize::MAX }
    }

    /// The binding horizon for the ticket at `step` (0-based): the first absolute step
    /// `T > step` whose slots are all needed, or `i64::MAX` when none is.
    #[inline]
    pub(super) fn horizon(&mut self, step: usize) -> i64 {
        let next = step + 1;
        if self.first_tight < next {
            self.first_tight = match self.slack.get(next..=self.covered) {
                Some(ahead) => first_tight_in(ahead).map_or(usize::MAX, |i| next + i),
                None => usize::MAX,
            };
        }
        if self.first_tight == usize::MAX {
            i64::MAX
        } else {
            self.first_tight as i64
        }
    }

    /// Records the ticket handed out at `step` that falls due at step `due`: early
    /// tickets take a slot from every later step before their due step.
    #[inline]
    pub(super) fn hand_out(&mut self, step: usize, due: i64) {
        let (from, to) = (step + 2, due as usize);
        if from >= to {
            return;
        }
        self.covered = self.covered.max(to - 1);
        // Only steps before the cached first tight step can lower it (a stale cache is
        // rescanned on the next query anyway).
        let end = to.min(self.first_tight.max(from));
        let mut low = i32::MAX;
        for s in &mut self.slack[from..end] {
            *s -= 1;
            low = low.min(*s);
        }
        for s in &mut self.slack[end..to] {
            *s -= 1;
        }
        if low <= 0 {
            self.first_tight = from + first_tight_in(&self.slack[from..end]).expect("a slack is at most zero");
        }
    }
}

/// Position of the first slack at most zero, checking 16 at a time branch-free.
pub(super) fn first_tight_in(slack: &[i32]) -> Option<usize> {
    let mut chunks = slack.chunks_exact(16);
    let mut base = 0;
    for chunk in &mut chunks {
        if chunk.iter().fold(i32::MAX, |low, &s| low.min(s)) <= 0 {
            return chunk.iter().position(|&s| s <= 0).map(|i| base + i);
        }
        base += 16;
    }
    chunks.remainder().iter().position(|&s| s <= 0).map(|i| base + i)
}

/// Fenwick tree over members of `(count, given)`, holding only members with positive
/// credit: any prefix's credit at step `s` is `(s+1)·Σcount − B·Σgiven`, so the sums stay
/// valid as steps pass and the draw descends the tree in `O(log m)`.
pub(super) struct CreditTree {
    nodes: Vec<(i64, i64)>,
    top: usize,
    sum: (i64, i64),
}

impl CreditTree {
    /// Every member present, none handed a ticket yet.
    pub(super) fn new(weight: &[i64]) -> Self {
        let len = weight.len();
        let mut nodes = vec![(0, 0); len + 1];
        for (k, &c) in weight.iter().enumerate() {
            let i = k + 1;
            nodes[i].0 += c;
            let parent = i + (i & i.wrapping_neg());
            if parent <= len {
                nodes[parent].0 += nodes[i].0;
            }
        }
        let top = if len == 0 { 0 } else { 1 << len.ilog2() };
        CreditTree { nodes, top, sum: (weight.iter().sum(), 0) }
    }

    pub(super) fn add(&mut self, member: usize, count: i64, given: i64) {
        let mut i = member + 1;
        while i < self.nodes.len() {
            self.nodes[i].0 += count;
            self.nodes[i].1 += given;
            i += i & i.wrapping_neg();
        }
        self.sum.0 += count;
        self.sum.1 += given;
    }

    /// Total credit of the members present, at the step whose 1-based index is `s1`.
    pub(super) fn total(&self, s1: i64, b: i64) -> i64 {
        s1 * self.sum.0 - b * self.sum.1
    }

    /// The first member (in member order) whose running credit sum exceeds `x`.
    pub(super) fn find(&self, x: i64, s1: i64, b: i64) -> usize {
        let (mut pos, mut rest, mut bit) = (0, x, self.top);
        while bit > 0 {
            let next = pos + bit;
            if next < self.nodes.len() {
                let (count, given) = self.nodes[next];
                let credit = s1 * count - b * given;
                if credit <= rest {
                    pos = next;
                    rest -= credit;
                }
            }
            bit >>= 1;
        }
        pos
    }
}
