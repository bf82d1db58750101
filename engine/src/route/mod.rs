//! Routing rules: a route's ordered rules choose the pool a request draws from, by
//! conditions on the request's attributes (amount ranges, currency, payment method,
//! country, merchant, any string attribute by equals / in / prefix). The first rule whose
//! conditions all hold wins; when none does, the route's default pool serves.
//!
//! A route is parsed once ([`Route::parse`], naming the field and rule of anything it
//! refuses) and then decides any number of requests ([`Route::decide`]) without allocating:
//! the data plane compiles a route once per published version, and the UI's rule tester
//! runs the same code in the browser.
//!
//! Layout: [`amount`] exact decimals, [`loose`] the JSON value parsed from.

pub mod amount;
pub mod loose;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize, Serializer};

pub use self::amount::Amount;
pub use self::loose::Loose;

/// Most rules a route holds.
pub const MAX_RULES: usize = 200;

/// Most attributes one rule's conditions name (and one request carries).
pub const MAX_ATTRIBUTES: usize = 32;

/// Most values an `in` condition lists.
pub const MAX_IN_VALUES: usize = 1000;

/// Longest attribute value (and `equals` / `prefix` / `in` value), in characters.
pub const MAX_VALUE_CHARS: usize = 256;

/// A refused route or attribute set: the field (`rules[1].when.amount.gte`) and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {rule}")]
pub struct RouteError {
    pub field: String,
    pub rule: String,
}

fn refuse<T>(field: impl Into<String>, rule: impl Into<String>) -> Result<T, RouteError> {
    Err(RouteError { field: field.into(), rule: rule.into() })
}

/// One end of an amount range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    pub amount: Amount,
    /// Whether the amount itself is inside (`gte`, `lte`) or not (`gt`, `lt`).
    pub inclusive: bool,
}

/// What a rule asks of one attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// The attribute is a decimal number within the bounds (at least one is set).
    Range { lower: Option<Bound>, upper: Option<Bound> },
    /// The attribute is exactly this text.
    Equals(String),
    /// The attribute is one of these texts (in the order given, without repeats).
    In(Vec<String>),
    /// The attribute's text starts with this.
    Prefix(String),
}

/// One rule: its name, its conditions (all must hold) and the pool it sends requests to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    name: String,
    conditions: Vec<(String, Condition)>,
    /// The `in` conditions' values as sets, in the order of `conditions` (None elsewhere).
    sets: Vec<Option<BTreeSet<String>>>,
    pool: String,
}

/// A route: ordered rules and the default pool. Invariants: at most [`MAX_RULES`] rules
/// with distinct names, every pool name valid, no rule after one that matches everything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    rules: Vec<Rule>,
    default_pool: String,
}

/// A request's attributes, validated and normalised (currency and country upper case).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    values: BTreeMap<String, Value>,
}

/// One attribute's value: its text, and its amount when the text is a decimal number.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Value {
    text: String,
    amount: Option<Amount>,
}

/// Which rule decided a request, and the pool it goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision<'r> {
    /// The matching rule's position and name; `None` when no rule matched (the default).
    pub rule: Option<(usize, &'r str)>,
    pub pool: &'r str,
}

/// Attribute names: a lower-case letter, then up to 63 of `[a-z0-9_]`.
pub fn check_attribute_name(field: &str, name: &str) -> Result<(), RouteError> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    if !first_ok || name.len() > 64 || !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
        return refuse(
            field,
            format!("attribute name {name:?} must be a lower-case letter then up to 63 of [a-z0-9_]"),
        );
    }
    Ok(())
}

/// Pool names: 1..=64 of `[A-Za-z0-9_-]` (as pools are named).
fn check_pool_name(field: &str, name: &str) -> Result<(), RouteError> {
    if name.is_empty() || name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return refuse(field, format!("pool name {name:?} must be 1..=64 of [A-Za-z0-9_-]"));
    }
    Ok(())
}

/// Rule names: 1..=64 of `[A-Za-z0-9_.-]`.
fn check_rule_name(field: &str, name: &str) -> Result<(), RouteError> {
    if name.is_empty() || name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) {
        return refuse(field, format!("rule name {name:?} must be 1..=64 of [A-Za-z0-9_.-]"));
    }
    Ok(())
}

/// A text value of attribute `attribute`, normalised: currency codes are three letters and
/// country codes two (both upper-cased); every value is 1..=[`MAX_VALUE_CHARS`] characters
/// without control characters.
fn normal_text(field: &str, attribute: &str, raw: &str) -> Result<String, RouteError> {
    let count = raw.chars().count();
    if count == 0 || count > MAX_VALUE_CHARS {
        return refuse(field, format!("must be 1..={MAX_VALUE_CHARS} characters, got {count}"));
    }
    if raw.chars().any(char::is_control) {
        return refuse(field, "must not hold control characters");
    }
    let letters = |n: usize, what: &str| {
        if raw.len() == n && raw.bytes().all(|b| b.is_ascii_alphabetic()) {
            Ok(raw.to_ascii_uppercase())
        } else {
            refuse(field, format!("{raw:?} is not {what} ({n} letters)"))
        }
    };
    match attribute {
        "currency" => letters(3, "an ISO 4217 currency code such as USD"),
        "country" => letters(2, "an ISO 3166 country code such as SG"),
        _ => Ok(raw.to_owned()),
    }
}

fn as_map<'a>(field: &str, value: &'a Loose) -> Result<&'a BTreeMap<String, Loose>, RouteError> {
    match value {
        Loose::Map(m) => Ok(m),
        other => refuse(field, format!("must be an object, got {}", other.kind())),
    }
}

fn as_text<'a>(field: &str, value: &'a Loose) -> Result<&'a str, RouteError> {
    match value {
        Loose::Text(t) => Ok(t),
        other => refuse(field, format!("must be a string, got {}", other.kind())),
    }
}

fn only_keys(field: &str, map: &BTreeMap<String, Loose>, allowed: &[&str]) -> Result<(), RouteError> {
    match map.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => refuse(
            if field.is_empty() { k.clone() } else { format!("{field}.{k}") },
            format!("unknown field; expected {}", allowed.join(", ")),
        ),
        None => Ok(()),
    }
}

fn amount_of(field: &str, value: &Loose) -> Result<Amount, RouteError> {
    let text = value
        .scalar_text()
        .ok_or_else(|| RouteError { field: field.into(), rule: format!("must be a number, got {}", value.kind()) })?;
    Amount::parse(text).map_err(|rule| RouteError { field: field.into(), rule })
}

impl Condition {
    fn parse(field: &str, attribute: &str, raw: &Loose) -> Result<Self, RouteError> {
        let map = as_map(field, raw)?;
        only_keys(field, map, &["gte", "gt", "lte", "lt", "equals", "in", "prefix"])?;
        let ranged: Vec<&str> = ["gte", "gt", "lte", "lt"].into_iter().filter(|k| map.contains_key(*k)).collect();
        let texts: Vec<&str> = ["equals", "in", "prefix"].into_iter().filter(|k| map.contains_key(*k)).collect();
        if ranged.is_empty() && texts.is_empty() {
            return refuse(field, "needs a range (gte, gt, lte, lt) or one of equals, in, prefix");
        }
        if !ranged.is_empty() && !texts.is_empty() || texts.len() > 1 {
            let all: Vec<&str> = ranged.iter().chain(&texts).copied().collect();
            return refuse(field, format!("takes a range or one of equals, in, prefix; got {}", all.join(" and ")));
        }
        if attribute == "amount" && ranged.is_empty() {
            return refuse(format!("{field}.{}", texts[0]), "amount takes a range: gte, gt, lte, lt");
        }
        if !ranged.is_empty() {
            return Self::range(field, map);
        }
        let at = |k: &str| format!("{field}.{k}");
        if let Some(v) = map.get("equals") {
            let text = v.scalar_text().ok_or_else(|| RouteError {
                field: at("equals"),
                rule: format!("must be a string or a number, got {}", v.kind()),
            })?;
            return Ok(Condition::Equals(normal_text(&at("equals"), attribute, text)?));
        }
        if let Some(v) = map.get("prefix") {
            return Ok(Condition::Prefix(normal_text(&at("prefix"), attribute, as_text(&at("prefix"), v)?)?));
        }
        let Some(Loose::List(items)) = map.get("in") else {
            let got = map.get("in").map_or("nothing", Loose::kind);
            return refuse(at("in"), format!("must be an array of strings, got {got}"));
        };
        if items.is_empty() || items.len() > MAX_IN_VALUES {
            return refuse(at("in"), format!("must list 1..={MAX_IN_VALUES} values, got {}", items.len()));
        }
        let mut values = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let f = format!("{field}.in[{i}]");
            let text = item.scalar_text().ok_or_else(|| RouteError {
                field: f.clone(),
                rule: format!("must be a string or a number, got {}", item.kind()),
            })?;
            let text = normal_text(&f, attribute, text)?;
            if !values.contains(&text) {
                values.push(text);
            }
        }
        Ok(Condition::In(values))
    }

    fn range(field: &str, map: &BTreeMap<String, Loose>) -> Result<Self, RouteError> {
        let bound = |key: &str, inclusive: bool| -> Result<Option<Bound>, RouteError> {
            map.get(key).map(|v| Ok(Bound { amount: amount_of(&format!("{field}.{key}"), v)?, inclusive })).transpose()
        };
        let (gte, gt, lte, lt) = (bound("gte", true)?, bound("gt", false)?, bound("lte", true)?, bound("lt", false)?);
        if gte.is_some() && gt.is_some() {
            return refuse(field, "takes gte or gt, not both");
        }
        if lte.is_some() && lt.is_some() {
            return refuse(field, "takes lte or lt, not both");
        }
        let (lower, upper) = (gte.or(gt), lte.or(lt));
        if let (Some(lo), Some(hi)) = (lower, upper) {
            let empty = lo.amount > hi.amount || (lo.amount == hi.amount && !(lo.inclusive && hi.inclusive));
            if empty {
                return refuse(field, format!("the range from {} to {} holds no amount", lo.amount, hi.amount));
            }
        }
        Ok(Condition::Range { lower, upper })
    }

    fn holds(&self, value: &Value, set: Option<&BTreeSet<String>>) -> bool {
        match self {
            Condition::Range { lower, upper } => value.amount.is_some_and(|a| {
                lower.is_none_or(|b| if b.inclusive { a >= b.amount } else { a > b.amount })
                    && upper.is_none_or(|b| if b.inclusive { a <= b.amount } else { a < b.amount })
            }),
            Condition::Equals(text) => value.text == *text,
            Condition::In(_) => set.is_some_and(|s| s.contains(&value.text)),
            Condition::Prefix(prefix) => value.text.starts_with(prefix.as_str()),
        }
    }

    /// The condition on `attribute` in words: `amount ≥ 1000 and < 5000`, `currency in USD, EUR`.
    pub fn describe(&self, attribute: &str) -> String {
        match self {
            Condition::Range { lower, upper } => {
                let lo = lower.map(|b| format!("{} {}", if b.inclusive { "≥" } else { ">" }, b.amount));
                let hi = upper.map(|b| format!("{} {}", if b.inclusive { "≤" } else { "<" }, b.amount));
                match (lo, hi) {
                    (Some(lo), Some(hi)) => format!("{attribute} {lo} and {hi}"),
                    (Some(one), None) | (None, Some(one)) => format!("{attribute} {one}"),
                    (None, None) => format!("{attribute} is a number"),
                }
            }
            Condition::Equals(text) => format!("{attribute} = {text}"),
            Condition::In(values) => format!("{attribute} in {}", values.join(", ")),
            Condition::Prefix(prefix) => format!("{attribute} starts with {prefix}"),
        }
    }
}

impl Rule {
    /// The rule's name (given, or `rule-<position + 1>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The pool it sends requests to.
    pub fn pool(&self) -> &str {
        &self.pool
    }

    /// Its conditions, by attribute, in attribute order.
    pub fn conditions(&self) -> &[(String, Condition)] {
        &self.conditions
    }

    /// Whether every condition holds for `attributes` (a rule without conditions matches
    /// every request).
    pub fn matches(&self, attributes: &Attributes) -> bool {
        self.conditions.iter().zip(&self.sets).all(|((attribute, condition), set)| {
            attributes.values.get(attribute).is_some_and(|v| condition.holds(v, set.as_ref()))
        })
    }

    /// The conditions in words, joined by "and"; "every request" for none.
    pub fn describe(&self) -> String {
        if self.conditions.is_empty() {
            return "every request".to_owned();
        }
        self.conditions.iter().map(|(a, c)| c.describe(a)).collect::<Vec<_>>().join(" and ")
    }
}

impl Route {
    /// Parses a route from its JSON form `{"rules": [{"name"?, "when": {attribute:
    /// condition}, "pool"}], "default_pool"}`, naming the field of the first rule broken.
    pub fn parse(raw: &Loose) -> Result<Self, RouteError> {
        let map = as_map("route", raw)?;
        only_keys("", map, &["rules", "default_pool"])?;
        let default_pool = match map.get("default_pool") {
            Some(v) => as_text("default_pool", v)?.to_owned(),
            None => return refuse("default_pool", "is required"),
        };
        check_pool_name("default_pool", &default_pool)?;
        let items = match map.get("rules") {
            Some(Loose::List(items)) => items.as_slice(),
            Some(other) => return refuse("rules", format!("must be an array, got {}", other.kind())),
            None => return refuse("rules", "is required (an empty list sends every request to default_pool)"),
        };
        if items.len() > MAX_RULES {
            return refuse("rules", format!("must hold at most {MAX_RULES} rules, got {}", items.len()));
        }
        let mut rules: Vec<Rule> = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let field = format!("rules[{i}]");
            if let Some(before) = rules.iter().find(|r| r.conditions.is_empty()) {
                return refuse(
                    field,
                    format!("is never reached: rule {:?} has no conditions and matches every request", before.name),
                );
            }
            let rule = Rule::parse(&field, i, item)?;
            if rules.iter().any(|r| r.name == rule.name) {
                return refuse(format!("{field}.name"), format!("{:?} names another rule too", rule.name));
            }
            rules.push(rule);
        }
        Ok(Route { rules, default_pool })
    }

    /// The rules, in the order they are tried.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The pool of requests no rule matches.
    pub fn default_pool(&self) -> &str {
        &self.default_pool
    }

    /// Every pool the route can send a request to: each rule's and the default, once each.
    pub fn pools(&self) -> BTreeSet<&str> {
        self.rules.iter().map(|r| r.pool.as_str()).chain([self.default_pool.as_str()]).collect()
    }

    /// The first rule whose conditions all hold for `attributes`, or the default pool.
    pub fn decide(&self, attributes: &Attributes) -> Decision<'_> {
        match self.rules.iter().enumerate().find(|(_, r)| r.matches(attributes)) {
            Some((i, rule)) => Decision { rule: Some((i, &rule.name)), pool: &rule.pool },
            None => Decision { rule: None, pool: &self.default_pool },
        }
    }
}

impl Rule {
    fn parse(field: &str, position: usize, raw: &Loose) -> Result<Self, RouteError> {
        let map = as_map(field, raw)?;
        only_keys(field, map, &["name", "when", "pool"])?;
        let name = match map.get("name") {
            Some(v) => as_text(&format!("{field}.name"), v)?.to_owned(),
            None => format!("rule-{}", position + 1),
        };
        check_rule_name(&format!("{field}.name"), &name)?;
        let pool = match map.get("pool") {
            Some(v) => as_text(&format!("{field}.pool"), v)?.to_owned(),
            None => return refuse(format!("{field}.pool"), "is required"),
        };
        check_pool_name(&format!("{field}.pool"), &pool)?;
        let when = match map.get("when") {
            Some(v) => as_map(&format!("{field}.when"), v)?,
            None => return refuse(format!("{field}.when"), "is required ({} matches every request)"),
        };
        if when.len() > MAX_ATTRIBUTES {
            return refuse(format!("{field}.when"), format!("names at most {MAX_ATTRIBUTES} attributes"));
        }
        let mut conditions = Vec::with_capacity(when.len());
        for (attribute, condition) in when {
            let at = format!("{field}.when.{attribute}");
            check_attribute_name(&at, attribute)?;
            conditions.push((attribute.clone(), Condition::parse(&at, attribute, condition)?));
        }
        let sets = conditions
            .iter()
            .map(|(_, c)| match c {
                Condition::In(values) => Some(values.iter().cloned().collect()),
                _ => None,
            })
            .collect();
        Ok(Rule { name, conditions, sets, pool })
    }
}

impl Attributes {
    /// Parses a request's attributes (`{"amount": 1250.5, "currency": "usd", …}`): each a
    /// string or a number; `amount` a decimal number; currency and country codes as in
    /// rules. Fields are named `attributes.<name>`.
    pub fn parse(raw: &Loose) -> Result<Self, RouteError> {
        let map = as_map("attributes", raw)?;
        if map.len() > MAX_ATTRIBUTES {
            return refuse("attributes", format!("must hold at most {MAX_ATTRIBUTES} attributes, got {}", map.len()));
        }
        let mut values = BTreeMap::new();
        for (name, value) in map {
            let field = format!("attributes.{name}");
            check_attribute_name(&field, name)?;
            let text = value.scalar_text().ok_or_else(|| RouteError {
                field: field.clone(),
                rule: format!("must be a string or a number, got {}", value.kind()),
            })?;
            let text = normal_text(&field, name, text)?;
            let amount = match Amount::parse(&text) {
                Ok(a) => Some(a),
                Err(rule) if name == "amount" => return refuse(field, rule),
                Err(_) => None,
            };
            values.insert(name.clone(), Value { text, amount });
        }
        Ok(Attributes { values })
    }

    /// How many attributes there are.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

impl Serialize for Route {
    /// The canonical form: every rule named, values normalised, amounts as exact strings.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_loose().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Route {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Route::parse(&Loose::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl Route {
    /// The canonical JSON form as a [`Loose`] value.
    pub fn to_loose(&self) -> Loose {
        let text = |s: &str| Loose::Text(s.to_owned());
        let rules = self
            .rules
            .iter()
            .map(|rule| {
                let when = rule
                    .conditions
                    .iter()
                    .map(|(attribute, condition)| {
                        let mut c = BTreeMap::new();
                        match condition {
                            Condition::Range { lower, upper } => {
                                if let Some(b) = lower {
                                    c.insert(
                                        if b.inclusive { "gte" } else { "gt" }.into(),
                                        text(&b.amount.to_string()),
                                    );
                                }
                                if let Some(b) = upper {
                                    c.insert(
                                        if b.inclusive { "lte" } else { "lt" }.into(),
                                        text(&b.amount.to_string()),
                                    );
                                }
                            }
                            Condition::Equals(v) => {
                                c.insert("equals".into(), text(v));
                            }
                            Condition::In(values) => {
                                c.insert("in".into(), Loose::List(values.iter().map(|v| text(v)).collect()));
                            }
                            Condition::Prefix(p) => {
                                c.insert("prefix".into(), text(p));
                            }
                        }
                        (attribute.clone(), Loose::Map(c))
                    })
                    .collect();
                Loose::Map(BTreeMap::from([
                    ("name".into(), text(&rule.name)),
                    ("when".into(), Loose::Map(when)),
                    ("pool".into(), text(&rule.pool)),
                ]))
            })
            .collect();
        Loose::Map(BTreeMap::from([
            ("rules".into(), Loose::List(rules)),
            ("default_pool".into(), text(&self.default_pool)),
        ]))
    }
}

impl fmt::Display for Route {
    /// One line per rule (`1. large-usd: amount ≥ 1000 and currency in USD → acq-large`),
    /// then the default.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, rule) in self.rules.iter().enumerate() {
            writeln!(f, "{}. {}: {} → {}", i + 1, rule.name, rule.describe(), rule.pool)?;
        }
        write!(f, "otherwise → {}", self.default_pool)
    }
}

#[cfg(test)]
mod tests;
