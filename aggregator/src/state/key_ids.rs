//! Which release key a lane's state was written under, and whether this
//! instance may resume it.
//!
//! Privacy argument: a window's noise is keyed by the release key (DESIGN
//! §5), so the same window released under two keys is two independent
//! noisy versions of it: twice the spend, which no cap counts. Every
//! charges record and ledger entry carries the writer's key id
//! (`PlanFingerprint.release_key_id`, [`crate::dp::rng::ReleaseKey::id`]).
//! An instance resumes a lane recorded under its own key, or under the key
//! it declares it replaces (`privacy.rotate_from`); any other key is
//! refused ([`KeyVerdict::Foreign`]). Under a declared rotation the new
//! key releases nothing the old one charged: windows charged under the old
//! key and not yet released are skipped (the old instance may still
//! publish them; the new key never does), so no window can be released
//! under both keys.

use super::Restored;
use crate::engine::window::Resume;
use proto::v1::PlanFingerprint;

/// This instance's key id and the id of the key it declares it replaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyIds {
    pub mine: String,
    pub rotated_from: Option<String>,
}

/// What a recorded key id means for this instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyVerdict {
    /// Written under this key (or before key ids were recorded).
    Same,
    /// Written under the key this instance declares it replaces.
    Rotated,
    /// Written under another key: refused.
    Foreign(String),
}

/// What every refusal of a lane written under another key tells the
/// operator to do.
pub const KEY_FIX: &str = "give this instance the key the lane was written under, or rotate: stop every instance \
     holding that key, then start with privacy.rotate_from set to its id (docs/operations.md#rotating-the-release-key)";

impl KeyIds {
    pub fn verdict(&self, recorded: &str) -> KeyVerdict {
        if recorded.is_empty() || recorded == self.mine {
            KeyVerdict::Same
        } else if self.rotated_from.as_deref() == Some(recorded) {
            KeyVerdict::Rotated
        } else {
            KeyVerdict::Foreign(recorded.to_string())
        }
    }

    /// Why an instance whose key was replaced by `new` stopped.
    pub fn superseded_message(&self, new: &str) -> String {
        format!(
            "release key {} was replaced: a release on the output topic was written under key {new}, declaring \
             privacy.rotate_from = \"{}\"; this instance releases nothing more (a window released under both keys \
             would be released twice). Give it the new key (docs/operations.md#rotating-the-release-key)",
            self.mine, self.mine
        )
    }

    /// Whether a release written under `writer` (declaring it replaces
    /// `writer_from`) supersedes this instance's key: another instance
    /// rotated away from it, so this one must release nothing more.
    pub fn superseded_by(&self, writer: &str, writer_from: &str) -> bool {
        writer != self.mine && writer_from == self.mine
    }
}

/// A lane and how many windows a declared rotation skipped in it.
pub type Skipped = ((String, i32), u64);

/// A lane whose state names a key this instance may not resume it under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignKey {
    pub stream: String,
    pub partition: i32,
    pub recorded: String,
}

impl std::fmt::Display for ForeignKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "stream '{}' partition {}: its state was written under release key {}. Two keys on one lane would \
             release a window twice with independent noise",
            self.stream, self.partition, self.recorded
        )
    }
}

impl KeyIds {
    /// Check the key of every recorded lane and window of `partitions`;
    /// under a declared rotation, move each lane's resume point over the
    /// windows the old key charged and did not release (the module's
    /// argument). Returns how many windows were skipped, per lane.
    pub fn check(
        &self,
        restored: &mut Restored,
        partitions: &[i32],
    ) -> Result<Vec<Skipped>, ForeignKey> {
        let foreign = |(stream, partition): (&String, i32), plan: &PlanFingerprint| match self
            .verdict(&plan.release_key_id)
        {
            KeyVerdict::Foreign(recorded) => Err(ForeignKey {
                stream: stream.clone(),
                partition,
                recorded,
            }),
            _ => Ok(()),
        };
        let mine = |p: &i32| partitions.contains(p);
        for ((s, p), plan) in restored.lane_plans.iter().filter(|l| mine(&l.0 .1)) {
            foreign((s, *p), plan)?;
        }
        // Windows released already were released once, whatever the key:
        // only those still to release matter.
        let unreleased = |(s, p, seq): &(String, i32, u64)| {
            let lane = (s.clone(), *p);
            mine(p) && restored.resume.get(&lane).is_none_or(|r| *seq > r.last_seq)
        };
        let windows = restored.window_plans.iter().filter(|w| unreleased(w.0));
        for ((s, p, _), plan) in windows {
            foreign((s, *p), plan)?;
        }
        if self.rotated_from.is_none() {
            return Ok(vec![]);
        }
        let mut skipped = vec![];
        let lanes = restored.charges.iter().filter(|(l, _)| mine(&l.1));
        for (lane, windows) in lanes {
            let mut at = restored.resume.get(lane).copied();
            let Some(first) = at
                .map(|r| r.last_seq + 1)
                .or(windows.keys().next().copied())
            else {
                continue;
            };
            let mut n = 0;
            for seq in first.. {
                let w = (lane.0.clone(), lane.1, seq);
                let old = restored
                    .window_plans
                    .get(&w)
                    .map(|p| self.verdict(&p.release_key_id));
                let (true, Some(KeyVerdict::Rotated), Some(end)) = (
                    windows.contains_key(&seq),
                    old,
                    restored.window_ends.get(&w),
                ) else {
                    break;
                };
                let reference = at.map_or(end.reference_event_ms, |a| a.reference_event_ms);
                at = Some(Resume {
                    reference_event_ms: reference.max(end.reference_event_ms),
                    ..*end
                });
                n += 1;
            }
            if let (true, Some(at)) = (n > 0, at) {
                restored.resume.insert(lane.clone(), at);
                skipped.push((lane.clone(), n));
            }
        }
        skipped.sort();
        Ok(skipped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(from: Option<&str>) -> KeyIds {
        KeyIds {
            mine: "b".repeat(16),
            rotated_from: from.map(str::to_string),
        }
    }

    #[test]
    fn own_unrecorded_rotated_and_foreign_keys_are_told_apart() {
        let (a, b, c) = ("a".repeat(16), "b".repeat(16), "c".repeat(16));
        assert_eq!(ids(None).verdict(&b), KeyVerdict::Same);
        assert_eq!(ids(None).verdict(""), KeyVerdict::Same);
        assert_eq!(ids(None).verdict(&a), KeyVerdict::Foreign(a.clone()));
        assert_eq!(ids(Some(&a)).verdict(&a), KeyVerdict::Rotated);
        assert_eq!(ids(Some(&a)).verdict(&c), KeyVerdict::Foreign(c.clone()));
    }

    #[test]
    fn only_a_rotation_away_from_this_key_supersedes_it() {
        let (a, b, c) = ("a".repeat(16), "b".repeat(16), "c".repeat(16));
        let old = KeyIds {
            mine: a.clone(),
            rotated_from: None,
        };
        assert!(old.superseded_by(&b, &a));
        assert!(!old.superseded_by(&a, ""));
        assert!(!old.superseded_by(&b, ""));
        assert!(!old.superseded_by(&b, &c));
        // The new key reading the old key's releases is not superseded.
        assert!(!ids(Some(&a)).superseded_by(&a, ""));
    }

    /// Lane s/0: released up to 3 under key a; windows 2..=6 live, 4 and
    /// 5 charged under a, 6 under b.
    fn restored() -> Restored {
        let lane = ("s".to_string(), 0);
        let plan = |id: &str| PlanFingerprint {
            release_key_id: id.into(),
            ..Default::default()
        };
        let (a, b) = ("a".repeat(16), "b".repeat(16));
        let mut r = Restored::default();
        let end = |seq| Resume {
            last_seq: seq,
            last_offset: 10 * seq as i64,
            last_index: 1,
            reference_event_ms: 1000 * seq as i64,
        };
        r.resume.insert(lane.clone(), end(3));
        r.lane_plans.insert(lane.clone(), plan(&a));
        for seq in 2..=6u64 {
            r.charges
                .entry(lane.clone())
                .or_default()
                .insert(seq, Default::default());
            let w = ("s".to_string(), 0, seq);
            r.window_plans
                .insert(w.clone(), plan(if seq < 6 { &a } else { &b }));
            r.window_ends.insert(w, end(seq));
        }
        r
    }

    #[test]
    fn a_declared_rotation_skips_what_the_old_key_charged_and_nothing_else() {
        let mut r = restored();
        let skipped = ids(Some(&"a".repeat(16))).check(&mut r, &[0]).unwrap();
        assert_eq!(skipped, vec![(("s".to_string(), 0), 2)]);
        let at = r.resume[&("s".to_string(), 0)];
        assert_eq!(
            (at.last_seq, at.last_offset, at.reference_event_ms),
            (5, 50, 5000)
        );
        // Without the declaration the old key's state is refused.
        let e = ids(None).check(&mut restored(), &[0]).unwrap_err();
        assert_eq!(e.recorded, "a".repeat(16));
        assert!(e.to_string().contains("stream 's' partition 0"), "{e}");
        // Another partition's lanes are not this restore's business.
        assert_eq!(ids(None).check(&mut restored(), &[1]), Ok(vec![]));
        // A rotation from a third key refuses too.
        assert!(ids(Some(&"c".repeat(16)))
            .check(&mut restored(), &[0])
            .is_err());
        // Once the lane's latest state is the new key's, the old key's
        // released windows need no declaration.
        let mut r = restored();
        r.lane_plans
            .values_mut()
            .for_each(|p| p.release_key_id = "b".repeat(16));
        r.resume.values_mut().for_each(|at| at.last_seq = 6);
        assert_eq!(ids(None).check(&mut r, &[0]), Ok(vec![]));
        r.resume.values_mut().for_each(|at| at.last_seq = 4);
        assert!(
            ids(None).check(&mut r, &[0]).is_err(),
            "window 5 is the old key's, unreleased"
        );
    }
}
