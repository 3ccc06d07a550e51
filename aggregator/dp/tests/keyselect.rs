//! Audit of private key selection ([`fleetdp_dp::keyselect`]): the exact
//! release probabilities match sampling; a key held by one device is
//! released with probability ≤ δ/G; and over neighbouring count vectors
//! (one device in `G` keys, present or not) the Clopper–Pearson lower bound
//! on ε over the selection events never exceeds ε, while the point
//! estimate comes close (the noise is not inflated).

mod common;

use common::{cp_lower, cp_upper};
use fleetdp_dp::keyselect::KeySelection;
use fleetdp_dp::mechanism::Measure;
use rand::SeedableRng;

const RUNS: u64 = 400_000;
const ALPHA: f64 = 0.05;

fn released(s: &KeySelection, counts: &[u64], seed: u64) -> Vec<u64> {
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(seed);
    let mut hits = vec![0u64; 1 << counts.len()];
    for _ in 0..RUNS {
        let sel = s.select(&mut rng, counts);
        let pattern = sel
            .iter()
            .enumerate()
            .fold(0usize, |p, (i, &b)| p | (usize::from(b) << i));
        hits[pattern] += 1;
    }
    hits
}

#[test]
fn exact_release_probabilities_match_sampling() {
    for measure in [Measure::Pure, Measure::Zcdp] {
        let s = KeySelection::calibrate(measure, 1, 1.0, 1e-6).unwrap();
        let t = s.threshold as u64;
        for c in [t - 2, t, t + 2] {
            let hits = released(&s, &[c], c)[1];
            let p = s.release_probability(c);
            let (lo, hi) = (cp_lower(hits, RUNS, 1e-4), cp_upper(hits, RUNS, 1e-4));
            assert!(
                (lo..=hi).contains(&p),
                "{measure:?} c={c}: exact {p} outside [{lo}, {hi}]"
            );
        }
        assert!(s.release_probability(1) <= 1e-6);
    }
}

/// Neighbours: the device adds 1 to each of `G` keys' counts. Every event
/// is a set of release patterns; ε̂ = ln(P(E|a)/P(E|b)) with CP bounds.
#[test]
fn the_empirical_epsilon_stays_below_epsilon() {
    for (measure, budget, g) in [(Measure::Pure, 1.0, 1), (Measure::Pure, 1.0, 2)] {
        let s = KeySelection::calibrate(measure, g, budget, 1e-6).unwrap();
        let t = s.threshold as u64;
        let mut best = 0.0f64;
        for c in [t.saturating_sub(3), t - 1, t + 1] {
            let a_counts: Vec<u64> = vec![c + 1; g as usize];
            let b_counts: Vec<u64> = vec![c; g as usize];
            let a = released(&s, &a_counts, 7 + c);
            let b = released(&s, &b_counts, 99 + c);
            let events = a.len();
            let tests = (2 * events) as f64;
            for e in 0..events {
                for (x, y) in [(a[e], b[e]), (b[e], a[e])] {
                    if x == 0 {
                        continue;
                    }
                    let lower =
                        (cp_lower(x, RUNS, ALPHA / tests) / cp_upper(y, RUNS, ALPHA / tests)).ln();
                    assert!(
                        lower <= budget,
                        "{measure:?} G={g} c={c} pattern {e}: ε lower bound {lower} > {budget}"
                    );
                    if y > 0 {
                        best = best.max((x as f64 / y as f64).ln());
                    }
                }
            }
        }
        // Laplace of scale G/ε on each of G keys: the all-released pattern
        // reaches close to ε where both are likely enough to measure.
        assert!(
            best > 0.6 * budget,
            "{measure:?} G={g}: noise inflated? ε̂ = {best}"
        );
    }
}
