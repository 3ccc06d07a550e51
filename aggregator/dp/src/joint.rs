//! Joint quantiles: several levels chosen by one selection (JointExp,
//! Gillenwater, Joseph and Kulesza 2021, on a candidate grid) instead of
//! splitting ε across levels. An output is a tuple of candidate indices
//! `a₁ ≤ … ≤ a_m`; its utility is minus the L1 distance between the counts
//! of readings in the gaps it cuts — `(−∞, c_{a₁}]`, `(c_{a₁}, c_{a₂}]`, …,
//! `(c_{a_m}, ∞)` — and the target gap sizes `(q_j − q_{j−1})·n`, in units
//! of `1/den`: `−Σ_j |den·g_j − (num_j − num_{j−1})·n|`.
//!
//! Privacy argument (the sensitivity): under change-one `n` is fixed and a
//! changed reading leaves one gap and enters another, so two gap counts
//! move by one: `|Δu| ≤ 2·den` per reading, `2·k·den` for a device's `k`
//! readings, whatever `m` (brute-forced in `tests/sensitivity_bruteforce.rs`).
//! The selection over all tuples is then one permute-and-flip draw
//! calibrated to that sensitivity (exact, as every selection here). The
//! tuple space has `C(C + m − 1, m)` elements for `C` candidates; a
//! candidate list too long for [`MAX_TUPLES`] is thinned evenly first (a
//! function of the public candidates alone).

/// Most tuples one joint selection scores (8 MB of utilities).
pub const MAX_TUPLES: u64 = 500_000;

/// Most levels released jointly.
pub const MAX_LEVELS: usize = 4;

/// Number of nondecreasing `m`-tuples over `c` candidates, saturating.
pub fn tuples(c: u64, m: usize) -> u64 {
    // C(c + m − 1, m), computed incrementally (exact at every step).
    let mut r: u128 = 1;
    for i in 0..m as u128 {
        r = r * (c as u128 + i) / (i + 1);
        if r > u64::MAX as u128 {
            return u64::MAX;
        }
    }
    r as u64
}

/// `candidates` thinned evenly (first and last kept) until their tuples fit
/// [`MAX_TUPLES`].
pub fn fit(candidates: &[i64], m: usize) -> Vec<i64> {
    let mut step = 1;
    loop {
        let kept: Vec<i64> = candidates
            .iter()
            .enumerate()
            .filter(|&(i, _)| i % step == 0 || i == candidates.len() - 1)
            .map(|(_, &c)| c)
            .collect();
        if tuples(kept.len() as u64, m) <= MAX_TUPLES || kept.len() <= 2 {
            return kept;
        }
        step += 1;
    }
}

/// Call `f` on every nondecreasing `m`-tuple of indices below `c`, in
/// lexicographic order.
pub fn for_each_tuple(c: usize, m: usize, mut f: impl FnMut(&[usize])) {
    if c == 0 || m == 0 {
        return;
    }
    let mut t = vec![0usize; m];
    loop {
        f(&t);
        // Advance: the last position that can grow does, the rest follow it.
        let Some(p) = (0..m).rev().find(|&p| t[p] + 1 < c) else {
            return;
        };
        t[p] += 1;
        for q in p + 1..m {
            t[q] = t[p];
        }
    }
}

/// The tuple at `index` in [`for_each_tuple`]'s order.
pub fn tuple_at(c: usize, m: usize, index: usize) -> Vec<usize> {
    let mut seen = 0;
    let mut out = None;
    for_each_tuple(c, m, |t| {
        if seen == index && out.is_none() {
            out = Some(t.to_vec());
        }
        seen += 1;
    });
    out.expect("index within the tuples")
}

/// Utilities (units of `1/den`) of every tuple, in [`for_each_tuple`]'s
/// order, for readings `sorted` (ascending), `candidates` (ascending) and
/// levels `num/den` (ascending, one `den`).
pub fn utilities(sorted: &[i64], candidates: &[i64], nums: &[i64], den: i64) -> Vec<i128> {
    let n = sorted.len() as i128;
    let den = den as i128;
    // F[i] = #{x ≤ c_i}, in den units.
    let f: Vec<i128> = candidates
        .iter()
        .map(|&c| den * sorted.partition_point(|&x| x <= c) as i128)
        .collect();
    let m = nums.len();
    let targets: Vec<i128> = (0..=m)
        .map(|j| {
            let prev = if j == 0 { 0 } else { nums[j - 1] as i128 };
            let next = if j == m { den } else { nums[j] as i128 };
            (next - prev) * n
        })
        .collect();
    let mut out = Vec::with_capacity(tuples(candidates.len() as u64, m) as usize);
    for_each_tuple(candidates.len(), m, |t| {
        let mut below = 0;
        let mut u = 0;
        for (j, &a) in t.iter().enumerate() {
            u += (f[a] - below - targets[j]).abs();
            below = f[a];
        }
        u += (den * n - below - targets[m]).abs();
        out.push(-u);
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuples_are_counted_enumerated_and_decoded_alike() {
        for (c, m) in [(1, 1), (5, 1), (5, 2), (6, 3), (4, 4)] {
            let mut all = Vec::new();
            for_each_tuple(c, m, |t| all.push(t.to_vec()));
            assert_eq!(all.len() as u64, tuples(c as u64, m), "{c} {m}");
            assert!(all.windows(2).all(|w| w[0] < w[1]), "lexicographic");
            assert!(all.iter().all(|t| t.windows(2).all(|p| p[0] <= p[1])));
            for (i, t) in all.iter().enumerate() {
                assert_eq!(&tuple_at(c, m, i), t);
            }
        }
        assert_eq!(tuples(1251, 2), 1251 * 1252 / 2);
        assert_eq!(tuples(u64::MAX / 2, 3), u64::MAX);
    }

    #[test]
    fn thinning_fits_the_tuples_and_keeps_the_ends() {
        let c: Vec<i64> = (0..=1250).collect();
        for m in 1..=MAX_LEVELS {
            let kept = fit(&c, m);
            assert!(tuples(kept.len() as u64, m) <= MAX_TUPLES, "{m}");
            assert_eq!((kept[0], *kept.last().unwrap()), (0, 1250));
        }
        assert_eq!(fit(&c, 1), c, "nothing to thin");
    }

    #[test]
    fn the_best_tuple_cuts_the_target_gaps() {
        // 10 readings 0..9; p50 and p90 on candidates 0..9.
        let sorted: Vec<i64> = (0..10).collect();
        let candidates: Vec<i64> = (0..10).collect();
        let u = utilities(&sorted, &candidates, &[500_000, 900_000], 1_000_000);
        let best = u.iter().enumerate().max_by_key(|&(_, v)| *v).unwrap().0;
        // Gaps of 5, 4 and 1 readings: (−∞, 4], (4, 8], (8, ∞).
        assert_eq!(tuple_at(10, 2, best), vec![4, 8]);
        assert_eq!(u[best], 0);
    }
}
