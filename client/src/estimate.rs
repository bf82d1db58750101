//! Token estimates for a reservation: the prompt counted by the model's real tokenizer,
//! plus the most the model may write, times a safety margin.

use tiktoken_rs::tokenizer::{get_tokenizer, Tokenizer};

use crate::quota::{InvalidInput, Tokens};

/// The margin applied when none is configured: 5% over the count.
pub const DEFAULT_MARGIN: f64 = 1.05;

/// An estimate and how it was made.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Estimate {
    /// Tokens to reserve: `ceil((prompt_tokens + max_tokens) × margin)`.
    pub tokens: Tokens,
    /// The prompt's tokens by the encoding below.
    pub prompt_tokens: u64,
    /// The encoding used: the model's own, or `cl100k_base` for a model tiktoken does
    /// not know (an approximation, said here so callers can tell).
    pub encoding: &'static str,
    /// Whether the model was known to the tokenizer.
    pub model_known: bool,
}

/// Estimates the tokens a request may use. `margin` must be in `1.0..=10.0`.
pub fn estimate(prompt: &str, max_tokens: u64, model: &str, margin: f64) -> Result<Estimate, InvalidInput> {
    if !(1.0..=10.0).contains(&margin) {
        return Err(InvalidInput::new("margin", "must be between 1.0 and 10.0"));
    }
    if model.is_empty() || model.chars().count() > 128 {
        return Err(InvalidInput::new("model", "must be 1..=128 characters"));
    }
    let known = get_tokenizer(model);
    let tokenizer = known.unwrap_or(Tokenizer::Cl100kBase);
    let (bpe, encoding) = match tokenizer {
        Tokenizer::O200kBase | Tokenizer::O200kHarmony => (tiktoken_rs::o200k_base_singleton(), "o200k_base"),
        Tokenizer::P50kBase | Tokenizer::P50kEdit => (tiktoken_rs::p50k_base_singleton(), "p50k_base"),
        Tokenizer::R50kBase | Tokenizer::Gpt2 => (tiktoken_rs::r50k_base_singleton(), "r50k_base"),
        Tokenizer::Cl100kBase => (tiktoken_rs::cl100k_base_singleton(), "cl100k_base"),
    };
    let prompt_tokens = bpe.encode_ordinary(prompt).len() as u64;
    let raw = ((prompt_tokens as f64 + max_tokens as f64) * margin).ceil();
    let tokens = Tokens::parse("tokens", raw.min(i128::MAX as f64) as i128)?;
    Ok(Estimate { tokens, prompt_tokens, encoding, model_known: known.is_some() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_is_counted_by_the_models_own_tokenizer() {
        let e = estimate("hello world", 100, "gpt-4o", 1.0).unwrap();
        assert_eq!(e.encoding, "o200k_base");
        assert_eq!(e.prompt_tokens, 2);
        assert_eq!(e.tokens.get(), 102);
        let e = estimate("hello world", 10, "gpt-4", DEFAULT_MARGIN).unwrap();
        assert_eq!(e.encoding, "cl100k_base");
        assert_eq!(e.tokens.get(), 13); // ceil(12 × 1.05)
    }

    #[test]
    fn an_unknown_model_is_approximated_and_says_so() {
        let e = estimate("hello world", 0, "some-local-llama", 1.0).unwrap();
        assert!(!e.model_known);
        assert_eq!(e.encoding, "cl100k_base");
    }

    #[test]
    fn a_margin_below_one_or_an_empty_estimate_is_refused() {
        assert_eq!(estimate("x", 1, "gpt-4", 0.9).unwrap_err().field, "margin");
        assert_eq!(estimate("", 0, "gpt-4", 1.0).unwrap_err().field, "tokens");
    }
}
