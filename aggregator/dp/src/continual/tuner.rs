//! Offline search for BLT constants (feature `tuner`; `examples/tune_blt.rs`
//! prints the table the service ships). Not used at run time: the service
//! only reads the fixed constants, so every instance runs the same strategy.

use super::blt::Blt;

/// Search a d-buffer strategy minimising [`Blt::loss`] at `lifetime` windows
/// (deterministic Nelder–Mead with restarts in an unconstrained
/// parametrisation: `θ = logistic(a)`, `ω = softmax(b, 0)`).
pub fn tune(d: usize, lifetime: u64) -> Blt {
    let decode = |p: &[f64]| -> Blt {
        let theta: Vec<f64> = p[..d]
            .iter()
            .map(|a| (1.0 / (1.0 + (-a).exp())).clamp(1e-12, 1.0 - 1e-15))
            .collect();
        let z: f64 = 1.0 + p[d..].iter().map(|b| b.exp()).sum::<f64>();
        let omega: Vec<f64> = p[d..].iter().map(|b| (b.exp() / z).max(1e-300)).collect();
        Blt { theta, omega }
    };
    let objective = |p: &[f64]| -> f64 {
        let l = decode(p).loss(lifetime);
        if l.is_finite() {
            l.ln()
        } else {
            f64::MAX
        }
    };
    // Start: decays spread geometrically between 1/2 and 1 − 1/lifetime.
    let mut best: Vec<f64> = (0..d)
        .map(|j| {
            let gap = (lifetime as f64).powf(-((j + 1) as f64) / d as f64);
            ((1.0 - gap) / gap).ln()
        })
        .chain((0..d).map(|j| -1.0 - j as f64))
        .collect();
    let mut best_val = objective(&best);
    for round in 0..6 {
        let step = 1.0 / (1 + round) as f64;
        let (p, v) = nelder_mead(&objective, &best, step, 3000);
        if v < best_val {
            (best, best_val) = (p, v);
        }
    }
    decode(&best)
}

fn nelder_mead(f: &dyn Fn(&[f64]) -> f64, x0: &[f64], step: f64, iters: usize) -> (Vec<f64>, f64) {
    let n = x0.len();
    let mut pts: Vec<Vec<f64>> = vec![x0.to_vec()];
    for i in 0..n {
        let mut p = x0.to_vec();
        p[i] += step;
        pts.push(p);
    }
    let mut vals: Vec<f64> = pts.iter().map(|p| f(p)).collect();
    for _ in 0..iters {
        let mut idx: Vec<usize> = (0..=n).collect();
        idx.sort_by(|&a, &b| vals[a].total_cmp(&vals[b]));
        pts = idx.iter().map(|&i| pts[i].clone()).collect();
        vals = idx.iter().map(|&i| vals[i]).collect();
        let centroid: Vec<f64> = (0..n)
            .map(|k| pts[..n].iter().map(|p| p[k]).sum::<f64>() / n as f64)
            .collect();
        let along = |c: f64| -> Vec<f64> {
            (0..n)
                .map(|k| centroid[k] + c * (pts[n][k] - centroid[k]))
                .collect()
        };
        let r = along(-1.0);
        let fr = f(&r);
        if fr < vals[0] {
            let e = along(-2.0);
            let fe = f(&e);
            (pts[n], vals[n]) = if fe < fr { (e, fe) } else { (r, fr) };
        } else if fr < vals[n - 1] {
            (pts[n], vals[n]) = (r, fr);
        } else {
            let c = along(0.5);
            let fc = f(&c);
            if fc < vals[n] {
                (pts[n], vals[n]) = (c, fc);
            } else {
                for i in 1..=n {
                    pts[i] = (0..n)
                        .map(|k| pts[0][k] + 0.5 * (pts[i][k] - pts[0][k]))
                        .collect();
                    vals[i] = f(&pts[i]);
                }
            }
        }
    }
    let i = (0..=n)
        .min_by(|&a, &b| vals[a].total_cmp(&vals[b]))
        .expect("n ≥ 0");
    (pts[i].clone(), vals[i])
}
