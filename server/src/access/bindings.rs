//! What a data-plane token serves: the tenants it may reserve, settle and release for, the
//! pools and routes it may draw from, the channels it may report outcomes for. Each list is
//! names of its kind or `*` (any); a token made before bindings existed holds `*` in all four.

use std::collections::BTreeSet;

use api::access::TokenBindings;

use crate::error::ApiError;

/// The most names one list of a token's bindings may hold.
pub const MAX_BOUND_NAMES: usize = 1000;

/// The wildcard: every name of the kind, also those created later.
pub const ANY: &str = "*";

/// One kind of resource a data-plane request names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Tenant,
    Pool,
    Route,
    Channel,
}

impl Resource {
    /// The kind's name in bodies (`tenants`, …) and messages.
    pub fn field(self) -> &'static str {
        match self {
            Self::Tenant => "tenants",
            Self::Pool => "pools",
            Self::Route => "routes",
            Self::Channel => "channels",
        }
    }

    fn one(self) -> &'static str {
        match self {
            Self::Tenant => "tenant",
            Self::Pool => "pool",
            Self::Route => "route",
            Self::Channel => "channel",
        }
    }

    /// Refuses a name that is not one of this kind (the field named `<kind>s[<i>]`).
    fn check(self, i: usize, raw: &str) -> Result<(), ApiError> {
        let ok = match self {
            Self::Tenant => client::quota::TenantId::parse(raw).is_ok(),
            Self::Pool => client::pool::PoolName::parse(raw).is_ok(),
            Self::Route => client::route::RouteName::parse(raw).is_ok(),
            Self::Channel => client::health::ChannelCode::parse(raw).is_ok(),
        };
        if ok {
            return Ok(());
        }
        let rule = match self {
            Self::Channel => "must be \"*\" or a channel code: 1..=64 of [A-Za-z0-9_.-]",
            _ => "must be \"*\" or a name: 1..=64 of [A-Za-z0-9_-]",
        };
        Err(ApiError::bad_request(format!("{}[{i}]", self.field()), rule))
    }
}

/// One list: any name, or only these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bound {
    Any,
    Only(BTreeSet<String>),
}

impl Bound {
    /// Parses one list: `["*"]`, or distinct names of the kind (none at all is allowed: the
    /// token serves nothing of that kind).
    pub fn parse(kind: Resource, raw: &[String]) -> Result<Self, ApiError> {
        if raw.len() > MAX_BOUND_NAMES {
            return Err(ApiError::bad_request(kind.field(), format!("must hold at most {MAX_BOUND_NAMES} names")));
        }
        if raw.iter().any(|n| n == ANY) {
            if raw.len() > 1 {
                return Err(ApiError::bad_request(kind.field(), "\"*\" (any) stands alone, not beside names"));
            }
            return Ok(Self::Any);
        }
        let mut names = BTreeSet::new();
        for (i, name) in raw.iter().enumerate() {
            kind.check(i, name)?;
            if !names.insert(name.clone()) {
                return Err(ApiError::bad_request(
                    format!("{}[{i}]", kind.field()),
                    format!("{name:?} is named twice"),
                ));
            }
        }
        Ok(Self::Only(names))
    }

    fn allows(&self, name: &str) -> bool {
        match self {
            Self::Any => true,
            Self::Only(names) => names.contains(name),
        }
    }

    /// The list as stored and shown.
    pub fn to_vec(&self) -> Vec<String> {
        match self {
            Self::Any => vec![ANY.to_owned()],
            Self::Only(names) => names.iter().cloned().collect(),
        }
    }
}

/// What one data-plane token serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bindings {
    pub tenants: Bound,
    pub pools: Bound,
    pub routes: Bound,
    pub channels: Bound,
}

impl Bindings {
    /// Every name of every kind: admin-scope tokens, and tokens made before bindings.
    pub fn any() -> Self {
        Self { tenants: Bound::Any, pools: Bound::Any, routes: Bound::Any, channels: Bound::Any }
    }

    /// Parses the four lists, naming the first field that breaks a rule.
    pub fn parse(body: &TokenBindings) -> Result<Self, ApiError> {
        Ok(Self {
            tenants: Bound::parse(Resource::Tenant, &body.tenants)?,
            pools: Bound::parse(Resource::Pool, &body.pools)?,
            routes: Bound::parse(Resource::Route, &body.routes)?,
            channels: Bound::parse(Resource::Channel, &body.channels)?,
        })
    }

    /// The bindings as stored: lists already checked when written. A list that no longer
    /// parses (never written by this code) serves nothing rather than everything.
    pub fn stored(tenants: &[String], pools: &[String], routes: &[String], channels: &[String]) -> Self {
        let read = |kind, raw: &[String]| Bound::parse(kind, raw).unwrap_or(Bound::Only(BTreeSet::new()));
        Self {
            tenants: read(Resource::Tenant, tenants),
            pools: read(Resource::Pool, pools),
            routes: read(Resource::Route, routes),
            channels: read(Resource::Channel, channels),
        }
    }

    fn of(&self, kind: Resource) -> &Bound {
        match kind {
            Resource::Tenant => &self.tenants,
            Resource::Pool => &self.pools,
            Resource::Route => &self.routes,
            Resource::Channel => &self.channels,
        }
    }

    /// 403 naming the resource unless the token serves `name` of `kind`.
    pub fn check(&self, kind: Resource, name: &str) -> Result<(), ApiError> {
        if self.of(kind).allows(name) {
            return Ok(());
        }
        Err(ApiError::Forbidden(format!(
            "this token is not bound to {} {name:?}: its {} are {}",
            kind.one(),
            kind.field(),
            match self.of(kind) {
                Bound::Any => "any".to_owned(),
                Bound::Only(names) if names.is_empty() => "none".to_owned(),
                Bound::Only(names) =>
                    names.iter().take(5).map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
                        + if names.len() > 5 { ", …" } else { "" },
            }
        )))
    }

    /// The four lists as stored and shown.
    pub fn body(&self) -> TokenBindings {
        TokenBindings {
            tenants: self.tenants.to_vec(),
            pools: self.pools.to_vec(),
            routes: self.routes.to_vec(),
            channels: self.channels.to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(raw: &[&str]) -> Vec<String> {
        raw.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_list_is_any_or_distinct_names_of_its_kind() {
        assert_eq!(Bound::parse(Resource::Tenant, &names(&["*"])).unwrap(), Bound::Any);
        assert!(matches!(Bound::parse(Resource::Tenant, &names(&[])).unwrap(), Bound::Only(n) if n.is_empty()));
        let refused = |kind, raw: &[&str]| match Bound::parse(kind, &names(raw)).unwrap_err() {
            ApiError::BadRequest { field, .. } => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(refused(Resource::Tenant, &["acme", "*"]), "tenants");
        assert_eq!(refused(Resource::Pool, &["cn-pay", "cn pay"]), "pools[1]");
        assert_eq!(refused(Resource::Channel, &["A", "A"]), "channels[1]");
        assert_eq!(refused(Resource::Route, &["{tag}"]), "routes[0]");
        let many: Vec<String> = (0..=MAX_BOUND_NAMES).map(|i| format!("t{i}")).collect();
        assert!(Bound::parse(Resource::Tenant, &many).is_err());
    }

    #[test]
    fn a_token_serves_only_what_it_is_bound_to() {
        let body = TokenBindings { tenants: names(&["acme"]), channels: names(&[]), ..TokenBindings::default() };
        let b = Bindings::parse(&body).unwrap();
        assert!(b.check(Resource::Tenant, "acme").is_ok());
        let ApiError::Forbidden(why) = b.check(Resource::Tenant, "globex").unwrap_err() else { panic!() };
        assert!(why.contains("tenant \"globex\"") && why.contains("\"acme\""), "{why}");
        assert!(b.check(Resource::Pool, "anything").is_ok());
        assert!(b.check(Resource::Channel, "A").is_err());
        assert_eq!(b.body().tenants, names(&["acme"]));
        assert_eq!(Bindings::stored(&names(&["*"]), &names(&["*"]), &names(&["*"]), &names(&["*"])), Bindings::any());
    }
}
