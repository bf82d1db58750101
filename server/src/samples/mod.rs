//! Pool samples: what each pool drew per minute, for charts ([`routes`]); written by the
//! `pool_sampler` job and kept in [`store`].

pub mod routes;
pub mod store;
