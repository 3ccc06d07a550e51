//! Window release: from a stream's declaration, a calibrated [`StreamPlan`];
//! from a window's integer values, every declared statistic with noise,
//! post-processing and metadata.
//!
//! Privacy argument: each noisy *measurement* (centred sum, centred sum of
//! squares, histogram, each quantile selection, and the count under
//! add-remove) is calibrated to its sensitivity from [`super::stats`] and
//! charged by the [`super::accountant`]; every *statistic* (sum, mean,
//! variance, std, histogram, quantiles) is a post-processing of those
//! measurements and public parameters, so it costs nothing more.

mod adaptive;
mod derived;
mod evaluate;
mod fleet;
mod grouped;
mod measurements;
mod moments;
mod plan;
mod post;
mod rank;
mod running;
mod spec;
mod statistic;
mod targets;
#[cfg(test)]
mod tests;
mod window;
pub use window::QuantileChoices;

pub use adaptive::*;
pub use fleet::*;
pub use grouped::{
    group_stream_name, slot_value, GroupOf, GroupSpec, PrivateKeys, MAX_GROUPS_PER_STREAM,
    MAX_GROUP_KEY, MAX_PRIVATE_KEYS,
};
pub use plan::*;
use post::Measured;
pub use running::*;
pub use spec::*;
pub use statistic::*;
