//! Exact rational helpers used when turning float parameters (ε, ρ, shares)
//! into the rational scales the exact samplers need.
//!
//! Every f64 is a dyadic rational, so converting it is exact. Rounding is
//! always directed (down for budgets, up for noise scales) so that the privacy
//! actually spent is never above the declared amount.

use num_bigint::{BigInt, BigUint};
use num_rational::BigRational;
use num_traits::{One, Signed, ToPrimitive};

/// Significant bits kept when a rational is rounded to a small one.
pub const ROUNDING_BITS: u32 = 40;

/// Exact value of a finite f64.
///
/// # Panics
/// On NaN or ±∞; callers validate their parameters first.
pub fn exact(x: f64) -> BigRational {
    BigRational::from_float(x).expect("finite float")
}

/// The shortest decimal that reads back as `x` (`0.2` is 1/5, not the
/// binary float just above it), exactly. Budget shares are taken this way,
/// so the splits people write (5 × 0.2, 10 × 0.1, 20 × 0.05) add up to 1
/// exactly; the spend is then calibrated from these same rationals, so
/// what is checked is what is spent.
///
/// # Panics
/// On NaN or ±∞; callers validate their parameters first.
pub fn decimal(x: f64) -> BigRational {
    assert!(x.is_finite(), "finite float");
    // `{:e}` prints the shortest round-trip digits: `2e-1`, `-1.25e3`.
    let text = format!("{x:e}");
    let (mantissa, exponent) = text.split_once('e').expect("exponent form");
    let exponent: i64 = exponent.parse().expect("decimal exponent");
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits: BigInt = format!("{int}{frac}").parse().expect("decimal digits");
    let shift = exponent - frac.len() as i64;
    let ten = BigInt::from(10);
    if shift >= 0 {
        BigRational::from_integer(digits * num_traits::pow(ten, shift as usize))
    } else {
        BigRational::new(digits, num_traits::pow(ten, (-shift) as usize))
    }
}

/// A rational from integers.
pub fn ratio(num: i64, den: i64) -> BigRational {
    BigRational::new(BigInt::from(num), BigInt::from(den))
}

/// An integer as a rational.
pub fn int(n: i64) -> BigRational {
    BigRational::from_integer(BigInt::from(n))
}

fn scale_exponent(x: &BigRational, bits: u32) -> i64 {
    // Pick s with x·2^s ≥ 2^bits, so the rounding error is ≤ 2^-bits relative.
    let num_bits = x.numer().bits() as i64;
    let den_bits = x.denom().bits() as i64;
    (bits as i64 + 1) - (num_bits - den_bits)
}

fn mul_pow2(x: &BigRational, s: i64) -> BigRational {
    if s >= 0 {
        x * BigRational::from_integer(BigInt::one() << (s as usize))
    } else {
        x / BigRational::from_integer(BigInt::one() << ((-s) as usize))
    }
}

/// The largest rational `≤ x` of the form `m / 2^s` with about `bits`
/// significant bits (x itself when it is already that simple). `x > 0`.
pub fn round_down(x: &BigRational, bits: u32) -> BigRational {
    assert!(x.is_positive(), "round_down needs a positive value");
    let s = scale_exponent(x, bits);
    let r = mul_pow2(&mul_pow2(x, s).floor(), -s);
    debug_assert!(&r <= x);
    r
}

/// The smallest rational `≥ x` of the form `m / 2^s` with about `bits`
/// significant bits. `x > 0`.
pub fn round_up(x: &BigRational, bits: u32) -> BigRational {
    assert!(x.is_positive(), "round_up needs a positive value");
    let s = scale_exponent(x, bits);
    let r = mul_pow2(&mul_pow2(x, s).ceil(), -s);
    debug_assert!(&r >= x);
    r
}

/// Nearest f64 (for reporting only; never used to decide privacy).
pub fn to_f64(x: &BigRational) -> f64 {
    x.to_f64().unwrap_or(f64::NAN)
}

/// Numerator and denominator of a positive rational as naturals.
pub fn parts(x: &BigRational) -> (BigUint, BigUint) {
    assert!(!x.is_negative());
    let n = x.numer().to_biguint().unwrap_or_default();
    let d = x.denom().to_biguint().expect("positive denominator");
    (n, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_is_the_written_number() {
        assert_eq!(decimal(0.2), ratio(1, 5));
        assert_eq!(decimal(0.05), ratio(1, 20));
        assert_eq!(decimal(1.0), int(1));
        assert_eq!(decimal(0.0), int(0));
        assert_eq!(decimal(1250.0), int(1250));
        assert_eq!(decimal(-0.3), ratio(-3, 10));
        assert_eq!(
            decimal(1e-300),
            BigRational::new(BigInt::from(1), num_traits::pow(BigInt::from(10), 300))
        );
        // Reads back as the float.
        for x in [0.1, 1.0 / 3.0, 2.5e-7, 123.456, 0.30000000000000004] {
            assert_eq!(to_f64(&decimal(x)), x);
        }
    }

    #[test]
    fn rounding_is_directed_and_tight() {
        for x in [1e-9, 0.1, 1.0 / 3.0, 1.0, 2.5, 12345.678, 1e12] {
            let e = exact(x);
            let (d, u) = (round_down(&e, 30), round_up(&e, 30));
            assert!(d <= e && e <= u);
            let rel = to_f64(&((&u - &d) / &e));
            assert!(rel < 1e-8, "{x}: {rel}");
        }
        assert_eq!(round_up(&int(100), 30), int(100));
        assert_eq!(round_down(&ratio(1, 4), 30), ratio(1, 4));
    }
}
