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

/// The longest run of whitespace, or of anything else, that the tokenizer is given at
/// once, in bytes. Byte-pair merging is quadratic in the length of one pre-tokenized piece,
/// and a piece never crosses from whitespace to non-whitespace but at one character, so a
/// prompt with no spaces (4 MiB of one letter) would be one piece costing minutes of CPU.
/// Cutting such runs makes the cost linear in the prompt; text of words never meets the
/// bound (a word of 256 bytes is rare), and a cut adds about one token to the count: an
/// estimate errs high, never low by more than a token per cut.
pub const MAX_RUN_BYTES: usize = 256;

/// The prompt's tokens as `count` counts its segments: the prompt cut where a run of
/// whitespace or of non-whitespace would pass [`MAX_RUN_BYTES`] (at a character boundary);
/// in one segment when no run does.
fn count_tokens(prompt: &str, mut count: impl FnMut(&str) -> u64) -> u64 {
    let mut total = 0;
    let (mut start, mut run, mut in_space) = (0, 0, false);
    for (i, c) in prompt.char_indices() {
        let space = c.is_whitespace();
        if space != in_space {
            (run, in_space) = (0, space);
        } else if run + c.len_utf8() > MAX_RUN_BYTES {
            total += count(&prompt[start..i]);
            (start, run) = (i, 0);
        }
        run += c.len_utf8();
    }
    total + count(&prompt[start..])
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
    let prompt_tokens = count_tokens(prompt, |segment| bpe.encode_ordinary(segment).len() as u64);
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
    fn runs_are_cut_at_the_bound_and_words_are_not() {
        let mut segments = Vec::new();
        let long = "ab".repeat(MAX_RUN_BYTES);
        let prompt = format!("hello world {long} é{}", " ".repeat(MAX_RUN_BYTES + 1));
        count_tokens(&prompt, |s| {
            segments.push(s.to_owned());
            1
        });
        assert_eq!(segments.concat(), prompt, "nothing lost or repeated");
        assert_eq!(segments.len(), 3, "the run of letters cut once, the run of spaces once");
        assert!(segments.iter().all(|s| s.split_whitespace().all(|w| w.len() <= MAX_RUN_BYTES)));
        let words = "the quick brown fox ".repeat(1000);
        assert_eq!(count_tokens(&words, |_| 1), 1, "text of words is one segment");
        // A cut costs the count at most about a token: 4 KiB of one letter, counted both ways.
        let bpe = tiktoken_rs::o200k_base_singleton();
        let run = "a".repeat(4096);
        let whole = bpe.encode_ordinary(&run).len() as u64;
        let cut = count_tokens(&run, |s| bpe.encode_ordinary(s).len() as u64);
        assert!(cut.abs_diff(whole) <= (4096 / MAX_RUN_BYTES) as u64, "{cut} vs {whole}");
    }

    #[test]
    fn a_margin_below_one_or_an_empty_estimate_is_refused() {
        assert_eq!(estimate("x", 1, "gpt-4", 0.9).unwrap_err().field, "margin");
        assert_eq!(estimate("", 0, "gpt-4", 1.0).unwrap_err().field, "tokens");
    }
}
