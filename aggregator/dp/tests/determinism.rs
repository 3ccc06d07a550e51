//! Keyed noise: the same key and window give bit-identical release bytes; a
//! changed value, seq or key gives different noise.

use fleetdp_dp::accountant::Budget;
use fleetdp_dp::mechanism::Measure;
use fleetdp_dp::relation::Relation;
use fleetdp_dp::release::{plan, PrivacySpec, ReleasedStatistic, StatKind, StreamSpec};
use fleetdp_dp::rng::ReleaseKey;

fn stream() -> StreamSpec {
    StreamSpec {
        name: "cabin_temp_c".into(),
        lower: -40.0,
        upper: 85.0,
        resolution: 0.1,
        window_size: 200,
        max_readings_per_device: 1,
        max_windows_per_device: 24,
        budget_share: 1.0,
        statistics: vec![
            StatKind::Sum,
            StatKind::Mean,
            StatKind::Std,
            StatKind::Histogram,
            StatKind::Quantiles,
        ],
        histogram_edges: vec![-40.0, 0.0, 10.0, 20.0, 30.0, 85.0],
        quantiles: vec![0.5, 0.9],
        quantile_candidates: None,
        adaptive_quantiles: false,
        joint_quantiles: false,
        target_error: vec![],
        window_timeout_ms: None,
        window_ms: None,
        running_share: 0.0,
        running_lifetime: 1 << 24,
        device_alarm_share: 0.0,
        groups: None,
    }
}

fn noise(release: &[ReleasedStatistic], truth: &[ReleasedStatistic]) -> Vec<f64> {
    release
        .iter()
        .zip(truth)
        .flat_map(|(r, t)| {
            r.values
                .iter()
                .zip(&t.values)
                .map(|(a, b)| a - b)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn same_key_and_window_give_identical_bytes_and_any_change_differs() {
    for measure in [Measure::Pure, Measure::Zcdp] {
        let privacy = PrivacySpec {
            relation: Relation::ChangeOne,
            budget: Budget {
                measure,
                per_horizon: 1.0,
                delta: 1e-6,
            },
        };
        // Two independent plans from the same declaration behave identically.
        let p1 = plan(&privacy, &[stream()]).unwrap();
        let p2 = plan(&privacy, &[stream()]).unwrap();
        let (s1, s2) = (&p1.streams[0], &p2.streams[0]);
        let key = ReleaseKey::from_bytes([42; 32]);
        let values: Vec<i64> = (0..200).map(|i| (i * 37 % 600) - 100).collect();
        let a = serde_json::to_vec(&s1.release(&key, 3, 17, &values)).unwrap();
        let b = serde_json::to_vec(&s2.release(&key, 3, 17, &values)).unwrap();
        assert_eq!(a, b, "{measure:?}: replay must be bit-identical");

        let base = s1.release(&key, 3, 17, &values);
        let base_noise = noise(&base, &s1.truth(&values));
        let mut changed = values.clone();
        changed[10] += 1;
        let other_noise = noise(&s1.release(&key, 3, 17, &changed), &s1.truth(&changed));
        assert_ne!(
            base_noise[0], other_noise[0],
            "{measure:?}: changed value, same sum noise"
        );
        assert_ne!(base_noise, other_noise);
        for r in [
            s1.release(&key, 3, 18, &values),
            s1.release(&key, 4, 17, &values),
            s1.release(&ReleaseKey::from_bytes([43; 32]), 3, 17, &values),
        ] {
            assert_ne!(serde_json::to_vec(&r).unwrap(), a);
        }
    }
}
