//! Tessera's pure algorithms (docs/design.md says why they are shaped so;
//! ARCHITECTURE.md maps who uses them). No IO, no async: the same code runs in the server,
//! the client, and the browser (wasm) for previews.
//!
//! Layout:
//! - [`weights`]: validated member weights (integers, decimals, percentages made exact).
//! - [`batch`]: the validated batch size.
//! - [`caps`]: short-window caps (most draws per member per window of minutes).
//! - [`apportion`]: per-batch ticket counts, carried between batches so every member stays
//!   within one ticket of its ideal share over any number of batches.
//! - [`order`]: orderings of a batch (`shuffle`, `smooth`) and the seam guard.
//! - [`selector`]: local pickers: smooth weighted round robin, alias-method weighted
//!   random, a binary-search baseline.
//! - [`hashing`]: a stable 64-bit hash and a weighted consistent-hash ring.
//! - [`tier`]: G/N/U tier fallback when the drawn tier has no channel.
//! - [`peak`]: peak windows in a pool's timezone (crossing midnight, DST-aware).
//! - [`quota`]: which quota buckets pay for a reservation, and overdrafts.
//! - [`metrics`]: distribution metrics of any ticket sequence.
//! - [`counter`]: what a per-day counter counted between two samples (restarts, midnights).
//! - [`verify`]: compares five allocation strategies on the same weights.
//! - [`ramp`]: the steps of a staged gray release and its guards' verdicts.
//! - [`replay`]: what a configuration would have done with a pool's recorded traffic.
//! - [`route`]: routing rules: conditions on a request's attributes choose its pool.
//! - [`preview`]: what new weights will do to a pool (shares, per-batch counts, spread),
//!   as the weights editor shows it before they are applied.
//!
//! Randomness is always passed in by the caller (`&mut impl rand::Rng`); nothing here
//! seeds itself.
#![forbid(unsafe_code)]

pub mod adaptive;
pub mod apportion;
pub mod batch;
pub mod caps;
pub mod counter;
pub mod hashing;
pub mod health;
pub mod metrics;
pub mod order;
pub mod peak;
pub mod preview;
pub mod quota;
pub mod ramp;
pub mod replay;
pub mod route;
pub mod runs;
pub mod selector;
pub mod tier;
pub mod verify;
pub mod weights;

pub use apportion::{Apportioner, ApportionerError};
pub use batch::{BatchSize, BatchSizeError};
pub use order::Ordering;
pub use tier::Tier;
pub use weights::{WeightError, Weights};
