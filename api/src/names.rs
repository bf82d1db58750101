//! Validated names: each parses into a type that holds only valid values, and a refusal
//! names the field and the rule.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A refused value: the field and the rule it broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub field: String,
    pub rule: String,
}

impl Invalid {
    pub fn new(field: impl Into<String>, rule: impl Into<String>) -> Self {
        Self { field: field.into(), rule: rule.into() }
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.rule)
    }
}

impl std::error::Error for Invalid {}

/// 1..=64 of ASCII letters, digits, `_`, `-` and the characters of `extra`.
fn identifier(field: &str, raw: &str, extra: &str) -> Result<String, Invalid> {
    if raw.is_empty() || raw.len() > 64 {
        return Err(Invalid::new(field, format!("must be 1..=64 characters, got {}", raw.chars().count())));
    }
    if let Some(bad) =
        raw.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-' || extra.contains(*c)))
    {
        return Err(Invalid::new(
            field,
            format!("may hold only ASCII letters, digits, '_', '-'{extra}; found {bad:?}"),
        ));
    }
    Ok(raw.to_owned())
}

macro_rules! validated_string {
    ($(#[$doc:meta])* $name:ident, pattern = $pattern:expr, $parse:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema), schema(value_type = String, pattern = $pattern))]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Parses the value, naming the field and the rule when it is refused.
            pub fn parse(raw: &str) -> Result<Self, Invalid> {
                let parse: fn(&str) -> Result<String, Invalid> = $parse;
                parse(raw).map(Self)
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                Self::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
            }
        }
    };
}

validated_string!(
    /// A channel's code: 1..=64 of `[A-Za-z0-9_.-]` (the name tickets carry).
    ChannelCode, pattern = "^[A-Za-z0-9_.-]{1,64}$", |raw| identifier("code", raw, ".")
);
validated_string!(
    /// A plan's name: 1..=64 of `[A-Za-z0-9_-]`.
    PlanName, pattern = "^[A-Za-z0-9_-]{1,64}$", |raw| identifier("plan", raw, "")
);
validated_string!(
    /// A user's name: 1..=64 of `[A-Za-z0-9_.@-]` (as the table checks it).
    UserName, pattern = "^[A-Za-z0-9_.@-]{1,64}$", |raw| identifier("name", raw, ".@")
);
validated_string!(
    /// A human-readable name: 1..=200 characters once trimmed, not blank, no control
    /// characters.
    DisplayName,
    pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*[^\\s\\x00-\\x1f\\x7f-\\x9f][^\\x00-\\x1f\\x7f-\\x9f]*$",
    |raw| {
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return Err(Invalid::new("name", "must not be blank"));
        }
        if trimmed.chars().count() > 200 {
            return Err(Invalid::new("name", format!("must be at most 200 characters, got {}", trimmed.chars().count())));
        }
        if trimmed.chars().any(char::is_control) {
            return Err(Invalid::new("name", "must not hold control characters"));
        }
        Ok(trimmed.to_owned())
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_take_their_characters_and_refuse_others_by_field() {
        assert_eq!(ChannelCode::parse("CH_1.a-b").unwrap().as_str(), "CH_1.a-b");
        assert_eq!(PlanName::parse("pro").unwrap().to_string(), "pro");
        assert_eq!(UserName::parse("ops@example.com").unwrap().as_str(), "ops@example.com");
        assert_eq!(PlanName::parse("a.b").unwrap_err().field, "plan");
        assert_eq!(UserName::parse("").unwrap_err().field, "name");
        assert!(UserName::parse(&"x".repeat(65)).is_err());
        assert!(ChannelCode::parse("a b").unwrap_err().rule.contains("' '"));
        assert_eq!(DisplayName::parse("  Card  ").unwrap().as_str(), "Card");
        assert!(DisplayName::parse(" \t ").is_err());
        assert!(DisplayName::parse("a\u{7}b").is_err());
    }

    #[test]
    fn deserialising_applies_the_rule() {
        use serde::de::value::{Error, StrDeserializer};
        use serde::de::IntoDeserializer;
        let from = |raw: &'static str| -> StrDeserializer<'static, Error> { raw.into_deserializer() };
        assert_eq!(ChannelCode::deserialize(from("CH1")).unwrap().as_str(), "CH1");
        let refused = ChannelCode::deserialize(from("a b")).unwrap_err().to_string();
        assert!(refused.starts_with("code: "), "{refused}");
    }
}
