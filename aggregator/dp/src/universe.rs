//! Universe and top-coding: the declared range `[lower, upper]` on a grid of
//! step `resolution`, and the [`TopCoder`] that maps a raw reading to integer
//! grid units.
//!
//! Privacy argument: after top-coding every value lies in `[L, U]` (integer
//! units) whatever the input, so a changed reading moves any per-reading term by
//! at most `Δ = U − L`: this is the fact every sensitivity in [`super::stats`]
//! rests on. The universe is declared, never derived from data.

use thiserror::Error;

/// Why a universe declaration is refused.
#[derive(Debug, Error, PartialEq)]
pub enum UniverseError {
    #[error("resolution must be a finite number > 0, got {0}")]
    Resolution(f64),
    #[error("{field} must be finite, got {value}")]
    NotFinite { field: &'static str, value: f64 },
    #[error("{field} = {value} is not on the grid of resolution {resolution}")]
    OffGrid {
        field: &'static str,
        value: f64,
        resolution: f64,
    },
    #[error("lower ({lower}) must be below upper ({upper})")]
    Order { lower: f64, upper: f64 },
    #[error("{field} = {value} is too large for the grid (|units| must stay below 2^52)")]
    TooLarge { field: &'static str, value: f64 },
}

/// Why a single reading cannot be top-coded.
#[derive(Debug, Error, PartialEq, Eq, Clone, Copy)]
pub enum TopCodeError {
    #[error("value is NaN")]
    NaN,
    #[error("value is infinite")]
    Infinite,
}

/// A declared range on a grid, in integer units (`value = units × resolution`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Universe {
    lower: i64,
    upper: i64,
    resolution: f64,
}

const MAX_UNITS: f64 = (1u64 << 52) as f64;

fn units_of(field: &'static str, value: f64, resolution: f64) -> Result<i64, UniverseError> {
    if !value.is_finite() {
        return Err(UniverseError::NotFinite { field, value });
    }
    let u = value / resolution;
    if u.abs() >= MAX_UNITS {
        return Err(UniverseError::TooLarge { field, value });
    }
    let r = u.round();
    // Accept a bound that is on the grid up to float representation error.
    if (u - r).abs() > 1e-6 {
        return Err(UniverseError::OffGrid {
            field,
            value,
            resolution,
        });
    }
    Ok(r as i64)
}

/// `x.round()` (half away from zero) without the call into libm that
/// `f64::round` makes on the baseline x86-64 target (≈ 3% of a reading's
/// time in process). Below 2⁵² in magnitude, `x as i64` truncates exactly
/// and `x` minus its integer part is exact, so stepping away from zero on
/// a fraction of at least ½ is `round`; beyond, `x` is already an integer.
/// Equal to `f64::round` for every finite `x` but in the sign of a zero
/// result (a test checks it), which no caller distinguishes.
pub(crate) fn round(x: f64) -> f64 {
    if x.abs() >= MAX_UNITS {
        return x.round();
    }
    let t = x as i64 as f64;
    match x - t {
        f if f >= 0.5 => t + 1.0,
        f if f <= -0.5 => t - 1.0,
        _ => t,
    }
}

impl Universe {
    /// Declare a universe; both bounds must be on the grid and `lower < upper`.
    pub fn new(lower: f64, upper: f64, resolution: f64) -> Result<Self, UniverseError> {
        if !(resolution.is_finite() && resolution > 0.0) {
            return Err(UniverseError::Resolution(resolution));
        }
        let l = units_of("lower", lower, resolution)?;
        let u = units_of("upper", upper, resolution)?;
        if l >= u {
            return Err(UniverseError::Order { lower, upper });
        }
        Ok(Self {
            lower: l,
            upper: u,
            resolution,
        })
    }

    /// A universe given directly in units (tests and brute force).
    pub fn from_units(lower: i64, upper: i64, resolution: f64) -> Self {
        assert!(lower < upper && resolution > 0.0);
        Self {
            lower,
            upper,
            resolution,
        }
    }

    /// `L` in units.
    pub fn lower(&self) -> i64 {
        self.lower
    }
    /// `U` in units.
    pub fn upper(&self) -> i64 {
        self.upper
    }
    /// `Δ = U − L` in units.
    pub fn width(&self) -> i64 {
        self.upper - self.lower
    }
    /// `max(|L|, |U|)` in units.
    pub fn max_abs(&self) -> i64 {
        self.lower.abs().max(self.upper.abs())
    }
    /// Grid step in metric units.
    pub fn resolution(&self) -> f64 {
        self.resolution
    }
    /// A metric value → grid units, checked to lie on the grid (config values
    /// such as histogram edges).
    pub fn grid_units(&self, field: &'static str, value: f64) -> Result<i64, UniverseError> {
        units_of(field, value, self.resolution)
    }
    /// Number of grid points in the universe.
    pub fn grid_len(&self) -> u64 {
        (self.width() + 1) as u64
    }
}

/// Result of top-coding one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopCoded {
    /// Grid units in `[L, U]`.
    pub units: i64,
    /// Whether the value lay outside the universe and was clamped. This is
    /// private: it may only feed a DP statistic, never a raw metric or log.
    pub clamped: bool,
}

/// Rounds to the grid and clamps to the universe. NaN and ±∞ are errors.
#[derive(Debug, Clone, Copy)]
pub struct TopCoder {
    universe: Universe,
}

impl TopCoder {
    pub fn new(universe: Universe) -> Self {
        Self { universe }
    }

    /// Round `value` to the nearest grid point and clamp it to `[L, U]`.
    pub fn top_code(&self, value: f64) -> Result<TopCoded, TopCodeError> {
        if value.is_nan() {
            return Err(TopCodeError::NaN);
        }
        if value.is_infinite() {
            return Err(TopCodeError::Infinite);
        }
        let (l, u) = (self.universe.lower, self.universe.upper);
        // Clamp in float first so huge values cannot overflow the cast.
        let x = round(value / self.universe.resolution);
        if x < l as f64 {
            return Ok(TopCoded {
                units: l,
                clamped: true,
            });
        }
        if x > u as f64 {
            return Ok(TopCoded {
                units: u,
                clamped: true,
            });
        }
        Ok(TopCoded {
            units: x as i64,
            clamped: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`round`] is `f64::round` (up to a zero's sign): halves of both
    /// signs, values next to halves, near 2⁵² and beyond, tiny ones.
    #[test]
    fn round_is_rounding_half_away_from_zero() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut xs = vec![
            0.5,
            -0.5,
            1.5,
            -2.5,
            0.49999999999999994,
            -0.49999999999999994,
        ];
        xs.extend([
            MAX_UNITS - 0.5,
            MAX_UNITS,
            -MAX_UNITS + 0.5,
            1e300,
            -1e300,
            5e-324,
        ]);
        for _ in 0..200_000 {
            let m: f64 = rng.gen_range(-1.0..1.0);
            let x = m * 2f64.powi(rng.gen_range(-30..60));
            xs.extend([
                x,
                x.round() + 0.5,
                x.round() - 0.5,
                f64::from_bits(x.to_bits() + 1),
            ]);
        }
        for x in xs {
            let (a, b) = (round(x), x.round());
            // `==`: a zero's sign aside.
            assert!(a == b, "{x:e}: {a} against {b}");
        }
    }

    #[test]
    fn declarations_are_checked() {
        assert!(Universe::new(-40.0, 85.0, 0.1).is_ok());
        assert_eq!(
            Universe::new(1.0, 1.0, 0.5),
            Err(UniverseError::Order {
                lower: 1.0,
                upper: 1.0
            })
        );
        assert!(matches!(
            Universe::new(0.0, 1.05, 0.1),
            Err(UniverseError::OffGrid { field: "upper", .. })
        ));
        assert_eq!(
            Universe::new(0.0, 1.0, 0.0),
            Err(UniverseError::Resolution(0.0))
        );
        assert!(matches!(
            Universe::new(f64::NAN, 1.0, 0.1),
            Err(UniverseError::NotFinite { field: "lower", .. })
        ));
        assert!(matches!(
            Universe::new(0.0, 1e300, 1.0),
            Err(UniverseError::TooLarge { .. })
        ));
    }

    #[test]
    fn top_coding_rounds_and_clamps() {
        let t = TopCoder::new(Universe::new(-40.0, 85.0, 0.1).unwrap());
        assert_eq!(t.top_code(21.04).unwrap().units, 210);
        assert_eq!(t.top_code(21.06).unwrap().units, 211);
        assert_eq!(
            t.top_code(-1e308).unwrap(),
            TopCoded {
                units: -400,
                clamped: true
            }
        );
        assert_eq!(
            t.top_code(1e308).unwrap(),
            TopCoded {
                units: 850,
                clamped: true
            }
        );
        assert!(!t.top_code(85.0).unwrap().clamped);
        assert_eq!(t.top_code(f64::NAN), Err(TopCodeError::NaN));
        assert_eq!(t.top_code(f64::NEG_INFINITY), Err(TopCodeError::Infinite));
    }
}
