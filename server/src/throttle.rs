//! Throttling at the door: sign-in attempts per client address and per user name, and
//! unknown bearer tokens per client address, are rate-limited before any work is done
//! (no password hashed, no database asked), answered 429 with `Retry-After`. Unknown token
//! hashes are remembered briefly, so a flood of one made-up token costs no database query.
//! Every map here is bounded: the keys come from outside.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::ApiError;

/// The most keys one limiter or cache holds; past it, the entries that are full again (or,
/// failing that, all of them) are forgotten: a flood of new keys can cost memory up to this
/// bound and no more.
const MAX_KEYS: usize = 20_000;

/// A token bucket per key: `burst` at once, then one per `every`.
struct Limiter {
    burst: f64,
    every: Duration,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl Limiter {
    fn new(burst: u32, every: Duration) -> Self {
        Self { burst: f64::from(burst), every, buckets: Mutex::new(HashMap::new()) }
    }

    /// In how many seconds `key`'s bucket holds one again, when it is empty now (nothing taken).
    fn empty(&self, key: &str, now: Instant) -> Option<u64> {
        let per_second = 1.0 / self.every.as_secs_f64();
        let buckets = self.buckets.lock().expect("throttle");
        let (level, at) = buckets.get(key)?;
        let level = (level + now.duration_since(*at).as_secs_f64() * per_second).min(self.burst);
        (level < 1.0).then(|| ((1.0 - level) / per_second).ceil().max(1.0) as u64)
    }

    /// Takes one from `key`'s bucket, or says in how many seconds one will be there.
    fn take(&self, key: &str, now: Instant) -> Result<(), u64> {
        let per_second = 1.0 / self.every.as_secs_f64();
        let mut buckets = self.buckets.lock().expect("throttle");
        if buckets.len() >= MAX_KEYS && !buckets.contains_key(key) {
            let full =
                |(level, at): &(f64, Instant)| level + now.duration_since(*at).as_secs_f64() * per_second >= self.burst;
            buckets.retain(|_, b| !full(b));
            if buckets.len() >= MAX_KEYS {
                buckets.clear();
            }
        }
        let (level, at) = buckets.entry(key.to_owned()).or_insert((self.burst, now));
        *level = (*level + now.duration_since(*at).as_secs_f64() * per_second).min(self.burst);
        *at = now;
        if *level >= 1.0 {
            *level -= 1.0;
            Ok(())
        } else {
            Err(((1.0 - *level) / per_second).ceil().max(1.0) as u64)
        }
    }
}

/// How long an unknown token is remembered as unknown.
pub const UNKNOWN_TOKEN_MEMORY: Duration = Duration::from_secs(10);

/// The door's limits, shared by every worker of one instance.
#[derive(Clone)]
pub struct Door(Arc<Inner>);

struct Inner {
    sign_ins_by_address: Limiter,
    sign_ins_by_name: Limiter,
    unknown_tokens_by_address: Limiter,
    unknown_tokens: Mutex<HashMap<Vec<u8>, Instant>>,
}

/// How many sign-ins, or unknown tokens and sessions, one address may send at once by
/// default (then one a second).
pub const DEFAULT_ADDRESS_BURST: u32 = 30;

impl Default for Door {
    fn default() -> Self {
        Self::new(DEFAULT_ADDRESS_BURST)
    }
}

impl Door {
    /// The door with `address_burst` sign-ins and as many unknown credentials per address at
    /// once (then one a second each); 20 sign-ins per name at once, then one every 15 s.
    pub fn new(address_burst: u32) -> Self {
        Self(Arc::new(Inner {
            // A person mistyping, a page of sign-ins in a test: well within; a guesser: one a second.
            sign_ins_by_address: Limiter::new(address_burst, Duration::from_secs(1)),
            // One name, from anywhere: 20 at once, then one every 15 s (the lock-out checks at
            // most 5 passwords per 15 minutes anyway; this keeps a flood off the hasher).
            sign_ins_by_name: Limiter::new(20, Duration::from_secs(15)),
            unknown_tokens_by_address: Limiter::new(address_burst, Duration::from_secs(1)),
            unknown_tokens: Mutex::new(HashMap::new()),
        }))
    }
}

fn throttled(what: &str, retry_after_secs: u64) -> ApiError {
    ApiError::Throttled { message: format!("too many {what}: retry in {retry_after_secs} s"), retry_after_secs }
}

impl Door {
    /// A sign-in may be tried now from `address` for `name` (both buckets are taken from,
    /// so a flood spread over names still meets the address's, and one over addresses the
    /// name's), or 429.
    pub fn sign_in(&self, address: Option<IpAddr>, name: &str) -> Result<(), ApiError> {
        let now = Instant::now();
        let address = address_key(address);
        self.0
            .sign_ins_by_address
            .take(&address, now)
            .map_err(|s| throttled("sign-in attempts from this address", s))?;
        // Names are bounded in length by the body's limit; keyed case-folded and cut, so a
        // long made-up name costs what a short one does.
        let key: String = name.chars().take(64).flat_map(char::to_lowercase).collect();
        self.0.sign_ins_by_name.take(&key, now).map_err(|s| throttled("sign-in attempts for this name", s))
    }

    /// 429 when `address` has used up its unknown tokens and sessions for now: checked before
    /// a credential is looked up, so a flood of made-up ones costs no query once refused.
    pub fn may_ask(&self, address: Option<IpAddr>) -> Result<(), ApiError> {
        match self.0.unknown_tokens_by_address.empty(&address_key(address), Instant::now()) {
            Some(s) => Err(throttled("unknown API tokens or sessions from this address", s)),
            None => Ok(()),
        }
    }

    /// Whether `hash` was found unknown within [`UNKNOWN_TOKEN_MEMORY`].
    pub fn known_unknown(&self, hash: &[u8]) -> bool {
        let unknown = self.0.unknown_tokens.lock().expect("unknown tokens");
        unknown.get(hash).is_some_and(|at| at.elapsed() < UNKNOWN_TOKEN_MEMORY)
    }

    /// An unknown bearer token from `address`: remembered, and counted against the address
    /// (429 past its limit).
    pub fn unknown_token(&self, address: Option<IpAddr>, hash: Vec<u8>) -> Result<(), ApiError> {
        let now = Instant::now();
        {
            let mut unknown = self.0.unknown_tokens.lock().expect("unknown tokens");
            if unknown.len() >= MAX_KEYS {
                unknown.retain(|_, at| at.elapsed() < UNKNOWN_TOKEN_MEMORY);
                if unknown.len() >= MAX_KEYS {
                    unknown.clear();
                }
            }
            unknown.insert(hash, now);
        }
        let address = address_key(address);
        self.0
            .unknown_tokens_by_address
            .take(&address, now)
            .map_err(|s| throttled("unknown API tokens from this address", s))
    }
}

/// The key an address is throttled by: an IPv4 address, or an IPv6 address's /64 (one
/// host usually holds a whole /64, and would otherwise get a bucket per address).
fn address_key(address: Option<IpAddr>) -> String {
    match address {
        None => "unknown".to_owned(),
        Some(IpAddr::V4(v4)) => v4.to_string(),
        Some(IpAddr::V6(v6)) => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
    }
}

/// The client's address: the peer's, or behind a reverse proxy the last address in the
/// configured trusted header (the one the proxy itself appended; earlier ones are the
/// client's own claims). Without that setting, forwarded headers are never read.
pub fn client_address(
    peer: Option<std::net::SocketAddr>,
    headers: &actix_web::http::header::HeaderMap,
    trusted_header: Option<&str>,
) -> Option<IpAddr> {
    if let Some(name) = trusted_header {
        let forwarded = headers
            .get_all(name)
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .last()
            .and_then(|v| v.trim().parse::<IpAddr>().ok());
        if forwarded.is_some() {
            return forwarded;
        }
    }
    peer.map(|p| p.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_gives_its_burst_then_one_per_period_and_says_when() {
        let limiter = Limiter::new(3, Duration::from_secs(2));
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(limiter.take("a", t0).is_ok());
        }
        assert_eq!(limiter.take("a", t0), Err(2));
        assert!(limiter.take("b", t0).is_ok(), "keys are apart");
        assert!(limiter.take("a", t0 + Duration::from_secs(2)).is_ok(), "one more after a period");
        assert!(limiter.take("a", t0 + Duration::from_secs(2)).is_err());
    }

    #[test]
    fn a_flood_of_new_keys_stays_within_the_bound() {
        let limiter = Limiter::new(1, Duration::from_secs(3600));
        let t0 = Instant::now();
        for i in 0..(MAX_KEYS * 3) {
            let _ = limiter.take(&i.to_string(), t0);
        }
        assert!(limiter.buckets.lock().unwrap().len() <= MAX_KEYS);
    }

    #[test]
    fn the_forwarded_address_is_read_only_from_the_configured_header() {
        let mut headers = actix_web::http::header::HeaderMap::new();
        headers.insert(
            actix_web::http::header::HeaderName::from_static("x-forwarded-for"),
            actix_web::http::header::HeaderValue::from_static("6.6.6.6, 10.0.0.7"),
        );
        let peer = Some("127.0.0.1:5000".parse().unwrap());
        assert_eq!(
            client_address(peer, &headers, None),
            Some("127.0.0.1".parse().unwrap()),
            "not configured: the peer"
        );
        assert_eq!(client_address(peer, &headers, Some("x-forwarded-for")), Some("10.0.0.7".parse().unwrap()));
        assert_eq!(client_address(peer, &headers, Some("x-real-ip")), Some("127.0.0.1".parse().unwrap()));
    }
}
