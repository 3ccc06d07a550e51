//! Consumer events. Rebalances, in the order the consumer saw them:
//! librdkafka calls [`Context::post_rebalance`] inside `recv()`; the
//! consuming loop drains the channel before it handles the next message (or
//! on its idle tick) and acts on the net effect ([`net`]). Whether input
//! partition 0 is held is also set in the callback (the fleet writer's
//! role, runtime/fleet/leader.rs), so a revoke reaches the fleet task before the
//! partition moves to another instance. Commit results:
//! an asynchronous commit that the broker refuses is counted and flagged, so
//! the loop sends every partition's position again (an offset is only taken
//! as committed until a failure says otherwise).

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, ConsumerContext, Rebalance};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// One rebalance callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    Assigned(Vec<i32>),
    Revoked(Vec<i32>),
}

/// What the loop does about a run of events.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Changes {
    /// Partitions whose in-memory state must be dropped: every partition
    /// revoked or assigned (an assigned one restores from Kafka).
    pub dropped: Vec<i32>,
    /// Partitions held after the events (assigned and not revoked since).
    pub assigned: Vec<i32>,
    /// Partitions no longer held (revoked and not assigned since).
    pub revoked: Vec<i32>,
}

/// The net effect of `events`, in order: a partition assigned and then
/// revoked before the loop looked is revoked, never restored; one revoked
/// and then assigned again is assigned (its state rebuilt from Kafka, as
/// another instance may have released windows meanwhile).
pub(crate) fn net(events: impl IntoIterator<Item = Event>) -> Changes {
    let mut c = Changes::default();
    let add = |v: &mut Vec<i32>, p: i32| {
        if !v.contains(&p) {
            v.push(p);
        }
    };
    for e in events {
        match e {
            Event::Assigned(ps) => {
                for p in ps {
                    add(&mut c.dropped, p);
                    add(&mut c.assigned, p);
                    c.revoked.retain(|&q| q != p);
                }
            }
            Event::Revoked(ps) => {
                for p in ps {
                    add(&mut c.dropped, p);
                    add(&mut c.revoked, p);
                    c.assigned.retain(|&q| q != p);
                }
            }
        }
    }
    c.dropped.sort_unstable();
    c.assigned.sort_unstable();
    c.revoked.sort_unstable();
    c
}

/// The consumer's context: forwards rebalances to the loop.
pub(crate) struct Context {
    tx: Mutex<mpsc::Sender<Event>>,
    /// True while this consumer holds input partition 0: the fleet task
    /// writes fleet records then (runtime/fleet/leader.rs). Set here, in the
    /// callback, so a revoke reaches it before the partition moves on.
    leader: watch::Sender<bool>,
    pending: Arc<AtomicBool>,
    commit_failed: Arc<AtomicBool>,
}

/// The loop's end of the channel.
pub(crate) struct Events {
    /// In a mutex only to be `Sync` (the loop is its one user).
    rx: Mutex<mpsc::Receiver<Event>>,
    pending: Arc<AtomicBool>,
    commit_failed: Arc<AtomicBool>,
}

/// A connected context and receiver; `leader` follows input partition 0.
pub(crate) fn channel(leader: watch::Sender<bool>) -> (Context, Events) {
    let (tx, rx) = mpsc::channel();
    let pending = Arc::new(AtomicBool::new(false));
    let commit_failed = Arc::new(AtomicBool::new(false));
    (
        Context {
            tx: Mutex::new(tx),
            leader,
            pending: pending.clone(),
            commit_failed: commit_failed.clone(),
        },
        Events {
            rx: Mutex::new(rx),
            pending,
            commit_failed,
        },
    )
}

impl Events {
    /// Whether events arrived since the last [`Events::take`] (one atomic load).
    pub fn pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// Whether a commit failed since the last call.
    pub fn take_commit_failure(&self) -> bool {
        self.commit_failed.swap(false, Ordering::AcqRel)
    }

    /// The net effect of every event so far, or `None` if there were none.
    pub fn take(&self) -> Option<Changes> {
        if !self.pending.swap(false, Ordering::AcqRel) {
            return None;
        }
        let rx = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        Some(net(rx.try_iter()))
    }
}

impl Context {
    /// A rebalance as librdkafka reported it: to the loop, and to the
    /// fleet writer's flag when it moves input partition 0.
    fn rebalanced(&self, rebalance: &Rebalance<'_>) {
        let parts = |tpl: &rdkafka::TopicPartitionList| {
            tpl.elements().iter().map(|e| e.partition()).collect()
        };
        let zero =
            |tpl: &rdkafka::TopicPartitionList| tpl.elements().iter().any(|e| e.partition() == 0);
        match rebalance {
            Rebalance::Assign(tpl) => {
                if zero(tpl) {
                    self.leader.send_replace(true);
                }
                self.send(Event::Assigned(parts(tpl)))
            }
            Rebalance::Revoke(tpl) => {
                if zero(tpl) {
                    self.leader.send_replace(false);
                }
                self.send(Event::Revoked(parts(tpl)))
            }
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance error"),
        }
    }

    fn send(&self, e: Event) {
        // The receiver lives as long as the loop; after it, nobody cares.
        let _ = self.tx.lock().unwrap_or_else(|e| e.into_inner()).send(e);
        self.pending.store(true, Ordering::Release);
    }
}

impl ClientContext for Context {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        crate::clients::kafka::quiet_log(level, fac, log_message);
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        crate::clients::kafka::quiet_log(
            rdkafka::config::RDKafkaLogLevel::Error,
            &format!("{error}"),
            reason,
        );
    }
}

impl ConsumerContext for Context {
    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        self.rebalanced(rebalance);
    }

    fn commit_callback(
        &self,
        result: rdkafka::error::KafkaResult<()>,
        _: &rdkafka::TopicPartitionList,
    ) {
        if let Err(e) = result {
            tracing::warn!(error = %e, "offset commit failed; the positions are sent again");
            crate::telemetry::commit_failed();
            self.commit_failed.store(true, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Event::*;

    #[test]
    fn assigned_then_revoked_before_the_loop_looks_is_not_restored() {
        let c = net([Assigned(vec![0, 1]), Revoked(vec![1])]);
        assert_eq!(c.assigned, vec![0]);
        assert_eq!(c.revoked, vec![1]);
        assert_eq!(c.dropped, vec![0, 1]);
    }

    #[test]
    fn revoked_then_assigned_again_is_restored() {
        let c = net([Revoked(vec![2]), Assigned(vec![2, 3])]);
        assert_eq!(c.assigned, vec![2, 3]);
        assert_eq!(c.revoked, Vec::<i32>::new());
        assert_eq!(c.dropped, vec![2, 3]);
    }

    #[test]
    fn order_decides_and_nothing_is_lost() {
        let c = net([
            Assigned(vec![0]),
            Revoked(vec![0]),
            Assigned(vec![0]),
            Revoked(vec![5]),
        ]);
        assert_eq!(c.assigned, vec![0]);
        assert_eq!(c.revoked, vec![5]);
        assert_eq!(c.dropped, vec![0, 5]);
        assert_eq!(net([]), Changes::default());
    }

    #[test]
    fn the_channel_keeps_order_and_flags_pending_events() {
        let (ctx, events) = channel(watch::channel(false).0);
        assert!(!events.pending());
        assert_eq!(events.take(), None);
        ctx.send(Assigned(vec![4]));
        ctx.send(Revoked(vec![4]));
        assert!(events.pending());
        let c = events.take().unwrap();
        assert_eq!((c.assigned, c.revoked), (vec![], vec![4]));
        assert!(!events.pending());
        assert_eq!(events.take(), None);
    }

    #[test]
    fn a_failed_commit_is_flagged_once_and_a_good_one_is_not() {
        let (ctx, events) = channel(watch::channel(false).0);
        let tpl = rdkafka::TopicPartitionList::new();
        ctx.commit_callback(Ok(()), &tpl);
        assert!(!events.take_commit_failure());
        ctx.commit_callback(
            Err(rdkafka::error::KafkaError::ConsumerCommit(
                rdkafka::types::RDKafkaErrorCode::RebalanceInProgress,
            )),
            &tpl,
        );
        assert!(events.take_commit_failure());
        assert!(!events.take_commit_failure(), "taken once");
    }

    #[test]
    fn the_fleet_writer_flag_follows_input_partition_zero() {
        let (tx, rx) = watch::channel(false);
        let (ctx, events) = channel(tx);
        let tpl = |ps: &[i32]| {
            let mut t = rdkafka::TopicPartitionList::new();
            for &p in ps {
                t.add_partition("in", p);
            }
            t
        };
        ctx.rebalanced(&Rebalance::Assign(&tpl(&[2, 3])));
        assert!(!*rx.borrow(), "no partition 0 yet");
        ctx.rebalanced(&Rebalance::Assign(&tpl(&[0, 1])));
        assert!(*rx.borrow());
        ctx.rebalanced(&Rebalance::Revoke(&tpl(&[1, 2])));
        assert!(*rx.borrow(), "partition 0 stays");
        ctx.rebalanced(&Rebalance::Revoke(&tpl(&[0])));
        assert!(!*rx.borrow(), "revoked before it moves on");
        let c = events.take().unwrap();
        assert_eq!((c.assigned, c.revoked), (vec![3], vec![0, 1, 2]));
    }
}
