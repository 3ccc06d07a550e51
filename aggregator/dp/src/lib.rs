//! The privacy core: top-coding, neighbouring relations, statistics with their
//! sensitivities, exact samplers, keyed randomness, mechanisms, accounting,
//! accuracy and the release of one window.
//!
//! Privacy argument in short: every private value is an integer on a declared
//! grid after [`universe::TopCoder`]; every statistic has a proven sensitivity for
//! the declared relation and `k` ([`stats`]); noise is drawn exactly from the
//! discrete distribution whose privacy map turns that sensitivity into the ε or ρ
//! charged by the [`accountant`]. Nothing here does I/O.

pub mod accountant;
pub mod accuracy;
pub mod advise;
pub mod advise_sums;
pub mod aggregate;
pub mod alarm;
pub mod continual;
pub mod groups;
pub mod joint;
pub mod keyselect;
pub mod local;
pub mod mechanism;
pub mod rational;
pub mod relation;
pub mod release;
pub mod rng;
pub mod sampler;
pub mod smooth;
pub mod stats;
pub mod sums;
pub mod universe;
