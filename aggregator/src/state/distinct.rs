//! How many distinct devices a lane's charges hold, estimated while
//! restore's first pass reads them (HyperLogLog, 2¹² registers, ≈ 1.6%
//! standard error, 4 KiB per lane), so the second pass can size the lane's
//! table once instead of growing it as devices arrive (growing holds the
//! old and the new array at once: 1.67× the new table). Device keys are
//! uniform 64-bit hashes already. An estimate is only a size hint: a low
//! one lets the table grow as it would anyway.

/// Register index bits.
const BITS: u32 = 12;
const REGISTERS: usize = 1 << BITS;

/// A HyperLogLog sketch of device keys.
#[derive(Debug, Clone)]
pub struct Distinct {
    registers: Box<[u8; REGISTERS]>,
}

impl Default for Distinct {
    fn default() -> Self {
        Self {
            registers: Box::new([0; REGISTERS]),
        }
    }
}

impl Distinct {
    pub fn add(&mut self, key: u64) {
        let index = (key >> (64 - BITS)) as usize;
        let rest = key << BITS;
        let rank = if rest == 0 {
            64 - BITS + 1
        } else {
            rest.leading_zeros() + 1
        };
        let r = &mut self.registers[index];
        *r = (*r).max(rank as u8);
    }

    /// The estimated number of distinct keys added.
    pub fn estimate(&self) -> u64 {
        let m = REGISTERS as f64;
        let alpha = 0.7213 / (1.0 + 1.079 / m);
        let sum: f64 = self.registers.iter().map(|&r| 2f64.powi(-(r as i32))).sum();
        let raw = alpha * m * m / sum;
        let zeros = self.registers.iter().filter(|&&r| r == 0).count();
        // Small counts: linear counting is the better estimate.
        let e = if raw <= 2.5 * m && zeros > 0 {
            m * (m / zeros as f64).ln()
        } else {
            raw
        };
        e.round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn estimates_are_within_a_few_percent() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        for n in [0u64, 1, 100, 5_000, 100_000, 1_000_000] {
            let mut d = Distinct::default();
            for _ in 0..n {
                let k: u64 = rng.gen();
                d.add(k);
                d.add(k); // repeats do not count
            }
            let e = d.estimate() as f64;
            let tolerance = (0.05 * n as f64).max(2.0);
            assert!((e - n as f64).abs() <= tolerance, "{n}: estimated {e}");
        }
    }
}
