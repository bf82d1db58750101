//! A JSON value as routing rules and request attributes arrive, before they are parsed:
//! numbers kept as their decimal text (so an amount is never rounded through a float it
//! did not come as), every shape accepted, so that the parser, not serde, says which field
//! breaks which rule.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

/// Any JSON value. Objects refuse duplicate keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Loose {
    Null,
    Bool(bool),
    /// A number, as exact decimal text (`1000`, `999.99`, `-3`).
    Number(String),
    Text(String),
    List(Vec<Loose>),
    Map(BTreeMap<String, Loose>),
}

impl Loose {
    /// What kind of JSON value this is, for messages ("a number", "an object", …).
    pub fn kind(&self) -> &'static str {
        match self {
            Loose::Null => "null",
            Loose::Bool(_) => "a boolean",
            Loose::Number(_) => "a number",
            Loose::Text(_) => "a string",
            Loose::List(_) => "an array",
            Loose::Map(_) => "an object",
        }
    }

    /// A text value from a string (as given) or a number (its decimal text).
    pub fn scalar_text(&self) -> Option<&str> {
        match self {
            Loose::Text(s) | Loose::Number(s) => Some(s),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for Loose {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(LooseVisitor)
    }
}

struct LooseVisitor;

impl<'de> Visitor<'de> for LooseVisitor {
    type Value = Loose;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Loose, E> {
        Ok(Loose::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Loose, E> {
        Ok(Loose::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Loose, D::Error> {
        Loose::deserialize(d)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Loose, E> {
        Ok(Loose::Bool(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Loose, E> {
        Ok(Loose::Number(v.to_string()))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Loose, E> {
        Ok(Loose::Number(v.to_string()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Loose, E> {
        if !v.is_finite() {
            return Err(E::custom("numbers must be finite"));
        }
        // Rust prints the shortest text that reads back as the same double, without an
        // exponent: 999.99 stays "999.99". A double with more decimals than an amount
        // holds (1e-30) is rounded to the amount's precision rather than refused: it
        // came as a binary fraction, never as that exact decimal.
        let shortest = format!("{v}");
        let decimals = shortest.split_once('.').map_or(0, |(_, f)| f.len());
        if decimals <= super::amount::MAX_FRACTION_DIGITS {
            return Ok(Loose::Number(shortest));
        }
        let rounded = format!("{v:.18}");
        let rounded = rounded.trim_end_matches('0').trim_end_matches('.');
        Ok(Loose::Number(if rounded == "-0" { "0".to_owned() } else { rounded.to_owned() }))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Loose, E> {
        Ok(Loose::Text(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Loose, E> {
        Ok(Loose::Text(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Loose, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Loose::List(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Loose, A::Error> {
        let mut entries = BTreeMap::new();
        while let Some((key, value)) = map.next_entry::<String, Loose>()? {
            if entries.insert(key.clone(), value).is_some() {
                return Err(de::Error::custom(format!("duplicate key {key:?}")));
            }
        }
        Ok(Loose::Map(entries))
    }
}

impl Serialize for Loose {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Loose::Null => s.serialize_unit(),
            Loose::Bool(b) => s.serialize_bool(*b),
            // Integers go out as JSON integers; other numbers as their text.
            Loose::Number(n) => match (n.parse::<i64>(), n.parse::<f64>()) {
                (Ok(i), _) => s.serialize_i64(i),
                (_, Ok(f)) => s.serialize_f64(f),
                _ => s.serialize_str(n),
            },
            Loose::Text(t) => s.serialize_str(t),
            Loose::List(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Loose::Map(entries) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_their_decimal_text_and_duplicate_keys_are_refused() {
        let v: Loose = serde_json::from_str(r#"{"a": 999.99, "b": 1000, "c": -3, "d": [true, null, "x"]}"#).unwrap();
        let Loose::Map(m) = &v else { panic!("{v:?}") };
        assert_eq!(m["a"], Loose::Number("999.99".into()));
        assert_eq!(m["b"], Loose::Number("1000".into()));
        assert_eq!(m["c"], Loose::Number("-3".into()));
        assert_eq!(m["d"], Loose::List(vec![Loose::Bool(true), Loose::Null, Loose::Text("x".into())]));
        assert!(serde_json::from_str::<Loose>(r#"{"a": 1, "a": 2}"#).unwrap_err().to_string().contains("duplicate"));
        assert_eq!(serde_json::to_value(&v).unwrap()["b"], serde_json::json!(1000));
        // The last reads as a double first: its shortest text is what the rules see.
        let tiny: Loose = serde_json::from_str("[1e-30, -1e-30, 0.1234567890123456789]").unwrap();
        assert_eq!(
            tiny,
            Loose::List(vec![
                Loose::Number("0".into()),
                Loose::Number("0".into()),
                Loose::Number("0.12345678901234568".into())
            ])
        );
    }
}
