//! Pool samples: what each pool drew per minute, for charts ([`routes`]); taken by
//! [`sampler`] (the `pool_sampler` job runs it) and kept in [`store`].

pub mod routes;
pub mod sampler;
pub mod store;
