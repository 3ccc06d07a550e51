//! The accountant: the per-device budget per horizon, its split into streams,
//! windows and measurements, and the composition check.
//!
//! Privacy argument: a device touches at most `W` windows of a stream per
//! horizon in each of at most `G` groups (1 without group-by,
//! [`crate::groups`]) and, within a window, every measurement once;
//! sequential composition adds ε (pure DP) or ρ (zCDP), and groups compose
//! in parallel (a device's cost depends on `G`, not on how many groups
//! exist). So the per-device loss per horizon is
//! `Σ_streams G · (W · Σ_measurements spent + running totals) + key
//! selection` (the selection's noise already covers a device's `G` keys,
//! [`crate::keyselect`]), computed exactly and refused when above the
//! declared budget.

use super::mechanism::Measure;
use super::rational::{self, exact};
use num_bigint::BigInt;
use num_rational::BigRational;
use num_traits::{Signed, Zero};
use std::fmt::Write;

/// The operator's declaration: what one device may lose per horizon.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Budget {
    pub measure: Measure,
    /// ε (pure) or ρ (zCDP) per device per horizon.
    pub per_horizon: f64,
    /// δ for reporting a zCDP guarantee as (ε, δ); 0 under pure DP.
    pub delta: f64,
}

/// One stream's claim on the budget.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamClaim {
    pub name: String,
    /// Fraction of the horizon budget, in `(0, 1]` (`budget_share`, taken
    /// as the decimal it is written as: [`rational::decimal`]).
    pub share: f64,
    /// The part of that share its windows get, exact, in `(0, 1]`: what
    /// running totals and key selection (spent per horizon) leave.
    pub window_fraction: BigRational,
    /// `W`: windows of this stream one device may touch per horizon, in
    /// each of its groups.
    pub windows_per_horizon: u32,
    /// `G`: groups of this stream one device may count in per horizon (1:
    /// no group-by).
    pub groups_per_device: u32,
    /// Noisy measurements per window (the per-window budget is split evenly).
    pub measurements: usize,
}

/// One stream's actual spending per window, after calibration.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamSpend {
    pub name: String,
    pub windows_per_horizon: u32,
    /// `G` (1: no group-by): everything below is spent in each group.
    pub groups_per_device: u32,
    pub per_window: BigRational,
    /// Spent once per horizon, not per window (running totals).
    pub per_horizon: BigRational,
    /// Spent once per horizon on key selection (private keys), not per
    /// group: its noise is calibrated to a device's `G` keys.
    pub selection: BigRational,
}

/// A refused budget, with the numbers.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BudgetError {
    #[error("privacy budget must be a number in (0, 10^6], got {0}")]
    Budget(f64),
    #[error("delta must be in (0, 1) for zcdp, got {0}")]
    Delta(f64),
    #[error("stream '{name}': budget_share must be in (0, 1], got {share}")]
    Share { name: String, share: f64 },
    #[error("stream '{name}': max_windows_per_device must be ≥ 1")]
    Windows { name: String },
    #[error("stream '{name}': max_groups_per_device must be in [1, {max}]")]
    Groups { name: String, max: u32 },
    #[error("budget shares add up to {total} > 1: {detail}")]
    SharesOver { total: f64, detail: String },
    #[error("plan spends {unit} = {spent:.6} per device per horizon, above the declared {declared}: {detail}")]
    OverBudget {
        unit: &'static str,
        spent: f64,
        declared: f64,
        detail: String,
    },
}

/// Splits a [`Budget`] and checks that what is spent composes within it.
#[derive(Debug, Clone)]
pub struct Accountant {
    budget: Budget,
    total: BigRational,
}

impl Accountant {
    pub fn new(budget: Budget) -> Result<Self, BudgetError> {
        let b = budget.per_horizon;
        if !(b.is_finite() && b > 0.0 && b <= 1e6) {
            return Err(BudgetError::Budget(b));
        }
        if budget.measure == Measure::Zcdp && !(budget.delta > 0.0 && budget.delta < 1.0) {
            return Err(BudgetError::Delta(budget.delta));
        }
        Ok(Self {
            total: exact(b),
            budget,
        })
    }

    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// "ε" or "ρ".
    pub fn unit(&self) -> &'static str {
        match self.budget.measure {
            Measure::Pure => "ε",
            Measure::Zcdp => "ρ",
        }
    }

    /// Budget per measurement of each stream: `share · total / (G·W·m)`
    /// (exact; `None` for a stream with no noisy measurement).
    pub fn allocate(
        &self,
        claims: &[StreamClaim],
    ) -> Result<Vec<Option<BigRational>>, BudgetError> {
        let mut sum = BigRational::zero();
        let mut detail = String::new();
        for c in claims {
            if !(c.share.is_finite() && c.share > 0.0 && c.share <= 1.0) {
                return Err(BudgetError::Share {
                    name: c.name.clone(),
                    share: c.share,
                });
            }
            if c.windows_per_horizon == 0 {
                return Err(BudgetError::Windows {
                    name: c.name.clone(),
                });
            }
            if !(1..=crate::groups::MAX_GROUPS_PER_DEVICE).contains(&c.groups_per_device) {
                return Err(BudgetError::Groups {
                    name: c.name.clone(),
                    max: crate::groups::MAX_GROUPS_PER_DEVICE,
                });
            }
            sum += rational::decimal(c.share);
            let _ = write!(detail, "{} {}; ", c.name, c.share);
        }
        if sum > rational::int(1) {
            return Err(BudgetError::SharesOver {
                total: rational::to_f64(&sum),
                detail: detail.trim_end_matches("; ").to_string(),
            });
        }
        Ok(claims
            .iter()
            .map(|c| {
                (c.measurements > 0).then(|| {
                    let den = BigInt::from(c.windows_per_horizon as u64)
                        * BigInt::from(c.groups_per_device)
                        * BigInt::from(c.measurements as u64);
                    &self.total * rational::decimal(c.share) * &c.window_fraction
                        / BigRational::from_integer(den)
                })
            })
            .collect())
    }

    /// Per-device loss per horizon: `Σ G · (W · per_window + per_horizon) + selection`,
    /// refused when above the declared budget.
    pub fn compose(&self, spends: &[StreamSpend]) -> Result<BigRational, BudgetError> {
        let mut total = BigRational::zero();
        let mut detail = String::new();
        for s in spends {
            assert!(!s.per_window.is_negative());
            let g = BigRational::from_integer(BigInt::from(s.groups_per_device));
            let h = (&s.per_window
                * BigRational::from_integer(BigInt::from(s.windows_per_horizon))
                + &s.per_horizon)
                * &g
                + &s.selection;
            let groups = match s.groups_per_device {
                1 => String::new(),
                g => format!("{g} groups × "),
            };
            let _ = write!(
                detail,
                "{} {groups}{} windows × {:.6}{}{} = {:.6}; ",
                s.name,
                s.windows_per_horizon,
                rational::to_f64(&s.per_window),
                if s.per_horizon.is_zero() {
                    String::new()
                } else {
                    format!(" + running totals {:.6}", rational::to_f64(&s.per_horizon))
                },
                if s.selection.is_zero() {
                    String::new()
                } else {
                    format!(" + key selection {:.6}", rational::to_f64(&s.selection))
                },
                rational::to_f64(&h)
            );
            total += h;
        }
        if total > self.total {
            return Err(BudgetError::OverBudget {
                unit: self.unit(),
                spent: rational::to_f64(&total),
                declared: self.budget.per_horizon,
                detail: detail.trim_end_matches("; ").to_string(),
            });
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rational::ratio;

    fn pure(eps: f64) -> Accountant {
        Accountant::new(Budget {
            measure: Measure::Pure,
            per_horizon: eps,
            delta: 0.0,
        })
        .unwrap()
    }

    fn claim(name: &str, share: f64, w: u32, m: usize) -> StreamClaim {
        StreamClaim {
            name: name.into(),
            share,
            window_fraction: rational::int(1),
            windows_per_horizon: w,
            groups_per_device: 1,
            measurements: m,
        }
    }

    fn spend(name: &str, w: u32, g: u32, per_window: BigRational) -> StreamSpend {
        StreamSpend {
            name: name.into(),
            windows_per_horizon: w,
            groups_per_device: g,
            per_window,
            per_horizon: BigRational::zero(),
            selection: BigRational::zero(),
        }
    }

    /// Group-by composes in parallel across groups: the cost scales with
    /// `G`, whatever the number of groups; hand-computed.
    #[test]
    fn groups_compose_by_g_not_by_their_number() {
        let a = pure(3.0);
        let mut c = claim("by_firmware", 1.0, 4, 3);
        c.groups_per_device = 2;
        // 3 / (G·W·m) = 3 / (2·4·3) = 1/8 per measurement.
        assert_eq!(a.allocate(&[c.clone()]).unwrap(), vec![Some(ratio(1, 8))]);
        // Spent: G · W · (3 measurements × 1/8) = 2·4·3/8 = 3: exactly the budget.
        assert_eq!(
            a.compose(&[spend("by_firmware", 4, 2, ratio(3, 8))])
                .unwrap(),
            ratio(3, 1)
        );
        // With running totals (1/2 per horizon per group): 2·(4·1/4 + 1/2) = 3.
        let mut s = spend("by_firmware", 4, 2, ratio(1, 4));
        s.per_horizon = ratio(1, 2);
        assert_eq!(a.compose(&[s]).unwrap(), ratio(3, 1));
        // One more group per device is over: 3·4·3/8 = 4.5 > 3, named.
        let e = a
            .compose(&[spend("by_firmware", 4, 3, ratio(3, 8))])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("3 groups × 4 windows") && e.contains("4.5"),
            "{e}"
        );
        c.groups_per_device = 0;
        assert!(matches!(a.allocate(&[c]), Err(BudgetError::Groups { .. })));
    }

    #[test]
    fn allocation_matches_hand_computation() {
        let a = pure(2.0);
        let got = a
            .allocate(&[
                claim("a", 0.5, 4, 2),
                claim("b", 0.25, 1, 1),
                claim("c", 0.25, 3, 0),
            ])
            .unwrap();
        // a: 2·0.5/4/2 = 1/8; b: 2·0.25/1/1 = 1/2; c: nothing noisy.
        assert_eq!(got, vec![Some(ratio(1, 8)), Some(ratio(1, 2)), None]);
        let total = a
            .compose(&[spend("a", 4, 1, ratio(1, 4)), spend("b", 1, 1, ratio(1, 2))])
            .unwrap();
        assert_eq!(total, ratio(3, 2));
    }

    /// Issue: 5 × 0.2 was refused ("add up to 1 > 1"): the binary float
    /// 0.2 is a little above 1/5. Shares are the decimals written.
    #[test]
    fn even_splits_as_written_add_up_to_one() {
        let a = pure(1.0);
        for (n, share) in [(5, 0.2), (10, 0.1), (20, 0.05), (3, 1.0 / 3.0), (8, 0.125)] {
            let claims: Vec<StreamClaim> = (0..n)
                .map(|i| claim(&format!("s{i}"), share, 1, 1))
                .collect();
            let got = a
                .allocate(&claims)
                .unwrap_or_else(|e| panic!("{n} × {share}: {e}"));
            let spends: Vec<StreamSpend> = got
                .iter()
                .enumerate()
                .map(|(i, b)| spend(&format!("s{i}"), 1, 1, b.clone().unwrap()))
                .collect();
            assert!(
                a.compose(&spends).unwrap() <= rational::int(1),
                "{n} × {share}"
            );
        }
        // Just over is still over.
        let claims: Vec<StreamClaim> = (0..5)
            .map(|i| claim(&format!("s{i}"), 0.2000001, 1, 1))
            .collect();
        assert!(matches!(
            a.allocate(&claims),
            Err(BudgetError::SharesOver { .. })
        ));
        // A window fraction scales the allocation exactly.
        let mut c = claim("r", 0.2, 1, 1);
        c.window_fraction = ratio(9, 10);
        assert_eq!(a.allocate(&[c]).unwrap(), vec![Some(ratio(9, 50))]);
    }

    #[test]
    fn over_budget_is_refused_with_numbers() {
        let a = pure(1.0);
        let e = a
            .allocate(&[claim("a", 0.7, 1, 1), claim("b", 0.5, 1, 1)])
            .unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("1.2") && msg.contains("a 0.7") && msg.contains("b 0.5"),
            "{msg}"
        );
        let e = a.compose(&[spend("a", 24, 1, ratio(1, 20))]).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("1.2") && msg.contains("24 windows") && msg.contains("declared 1"),
            "{msg}"
        );
        assert!(matches!(
            a.allocate(&[claim("a", 0.0, 1, 1)]),
            Err(BudgetError::Share { .. })
        ));
        assert!(Accountant::new(Budget {
            measure: Measure::Zcdp,
            per_horizon: 1.0,
            delta: 0.0
        })
        .is_err());
    }
}
