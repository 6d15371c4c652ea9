//! PII filter for facts before they are stored: e-mail addresses, phone numbers, payment
//! card numbers (Luhn-checked), IBANs (mod-97-checked), national ids (US SSN, UK NINO,
//! Italian codice fiscale) and secrets / API keys.
//!
//! Policies: `allow` (store as is), `redact` (default: replace each finding with
//! `[REDACTED:<kind>]`), `reject` (do not store the fact). Checksums keep ordinary numbers
//! (dates, amounts, order numbers) from being mistaken for cards or IBANs.

use std::sync::LazyLock;

use regex::Regex;

/// What to do with a fact that holds PII.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PiiPolicy {
    Allow,
    #[default]
    Redact,
    Reject,
}

impl PiiPolicy {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "allow" => Some(PiiPolicy::Allow),
            "redact" => Some(PiiPolicy::Redact),
            "reject" => Some(PiiPolicy::Reject),
            _ => None,
        }
    }
}

/// A kind of PII.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PiiKind {
    Email,
    Phone,
    Card,
    Iban,
    NationalId,
    Secret,
}

impl PiiKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PiiKind::Email => "email",
            PiiKind::Phone => "phone",
            PiiKind::Card => "card",
            PiiKind::Iban => "iban",
            PiiKind::NationalId => "national_id",
            PiiKind::Secret => "secret",
        }
    }
}

/// The outcome of filtering one text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filtered {
    /// Store this text (unchanged, or redacted).
    Keep(String),
    /// Do not store (policy `reject` and PII found).
    Rejected(Vec<PiiKind>),
}

fn re(p: &str) -> Regex {
    Regex::new(p).unwrap_or_else(|e| panic!("bad built-in PII pattern {p}: {e}"))
}

static SECRET: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    vec![
        re(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)"),
        re(r"\b(sk|pk|rk)-[A-Za-z0-9_-]{16,}"),
        re(r"\bsk-ant-[A-Za-z0-9_-]{16,}"),
        re(r"\bAKIA[0-9A-Z]{16}\b"),
        re(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),
        re(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
        re(r"\bAIza[0-9A-Za-z_-]{35}\b"),
        re(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
        re(r"(?i)\b(api[_-]?key|secret|token|password|passwd)\b\s*(is|[:=])\s*\S{6,}"),
    ]
});
static EMAIL: LazyLock<Regex> =
    LazyLock::new(|| re(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"));
static IBAN: LazyLock<Regex> =
    LazyLock::new(|| re(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b"));
static CARD: LazyLock<Regex> = LazyLock::new(|| re(r"\b\d(?:[ -]?\d){12,18}\b"));
static NATIONAL: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    vec![
        re(r"\b\d{3}-\d{2}-\d{4}\b"),
        re(r"\b[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D]\b"),
        re(r"\b[A-Z]{6}\d{2}[A-EHLMPRST]\d{2}[A-Z]\d{3}[A-Z]\b"),
    ]
});
static PHONE: LazyLock<Regex> = LazyLock::new(|| re(r"(?:\+|\b)\d[\d\s().-]{7,}\d\b"));
static ISO_DATE: LazyLock<Regex> = LazyLock::new(|| re(r"\d{4}-\d{2}-\d{2}"));

fn luhn(digits: &[u32]) -> bool {
    let mut sum = 0;
    for (i, d) in digits.iter().rev().enumerate() {
        let mut d = *d;
        if i % 2 == 1 {
            d *= 2;
            if d > 9 {
                d -= 9;
            }
        }
        sum += d;
    }
    sum % 10 == 0
}

fn iban_ok(s: &str) -> bool {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    if !(15..=34).contains(&s.len()) {
        return false;
    }
    let rearranged = format!("{}{}", &s[4..], &s[..4]);
    let mut rem: u64 = 0;
    for c in rearranged.chars() {
        let v = match c {
            '0'..='9' => u64::from(c as u8 - b'0'),
            'A'..='Z' => u64::from(c as u8 - b'A') + 10,
            _ => return false,
        };
        rem = if v >= 10 { (rem * 100 + v) % 97 } else { (rem * 10 + v) % 97 };
    }
    rem == 1
}

/// Every PII finding in `text`: `(start, end, kind)`, non-overlapping, in order.
pub fn find(text: &str) -> Vec<(usize, usize, PiiKind)> {
    let mut found: Vec<(usize, usize, PiiKind)> = Vec::new();
    let push = |s: usize, e: usize, k: PiiKind, found: &mut Vec<(usize, usize, PiiKind)>| {
        if !found.iter().any(|(a, b, _)| s < *b && e > *a) {
            found.push((s, e, k));
        }
    };
    for r in SECRET.iter() {
        for m in r.find_iter(text) {
            push(m.start(), m.end(), PiiKind::Secret, &mut found);
        }
    }
    for m in EMAIL.find_iter(text) {
        push(m.start(), m.end(), PiiKind::Email, &mut found);
    }
    for m in IBAN.find_iter(text) {
        if iban_ok(m.as_str()) {
            push(m.start(), m.end(), PiiKind::Iban, &mut found);
        }
    }
    for m in CARD.find_iter(text) {
        let digits: Vec<u32> = m.as_str().chars().filter_map(|c| c.to_digit(10)).collect();
        if (13..=19).contains(&digits.len()) && luhn(&digits) {
            push(m.start(), m.end(), PiiKind::Card, &mut found);
        }
    }
    for r in NATIONAL.iter() {
        for m in r.find_iter(text) {
            push(m.start(), m.end(), PiiKind::NationalId, &mut found);
        }
    }
    for m in PHONE.find_iter(text) {
        let s = m.as_str().trim();
        let digits = s.chars().filter(char::is_ascii_digit).count();
        if (9..=15).contains(&digits) && !ISO_DATE.is_match(s) {
            push(m.start(), m.end(), PiiKind::Phone, &mut found);
        }
    }
    found.sort_by_key(|f| f.0);
    found
}

/// Apply a policy to one text.
pub fn filter(text: &str, policy: PiiPolicy) -> Filtered {
    if policy == PiiPolicy::Allow {
        return Filtered::Keep(text.to_string());
    }
    let found = find(text);
    if found.is_empty() {
        return Filtered::Keep(text.to_string());
    }
    if policy == PiiPolicy::Reject {
        return Filtered::Rejected(found.iter().map(|f| f.2).collect());
    }
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (s, e, k) in found {
        out.push_str(&text[last..s]);
        out.push_str(&format!("[REDACTED:{}]", k.as_str()));
        last = e;
    }
    out.push_str(&text[last..]);
    Filtered::Keep(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redact(s: &str) -> String {
        match filter(s, PiiPolicy::Redact) {
            Filtered::Keep(t) => t,
            Filtered::Rejected(_) => unreachable!(),
        }
    }

    #[test]
    fn redacts_each_kind() {
        let cases = [
            (
                "The user's e-mail is jane.doe+work@example.co.uk.",
                "The user's e-mail is [REDACTED:email].",
            ),
            ("The user's card is 4111 1111 1111 1111.", "The user's card is [REDACTED:card]."),
            (
                "The user's IBAN is DE89 3704 0044 0532 0130 00.",
                "The user's IBAN is [REDACTED:iban].",
            ),
            (
                "The user's phone number is +39 347 123 4567.",
                "The user's phone number is [REDACTED:phone].",
            ),
            ("The user's SSN is 123-45-6789.", "The user's SSN is [REDACTED:national_id]."),
            (
                "The user's codice fiscale is RSSMRA85T10A562S.",
                "The user's codice fiscale is [REDACTED:national_id].",
            ),
            (
                "The user's OpenAI key is sk-proj-abcdefghijklmnop1234.",
                "The user's OpenAI key is [REDACTED:secret].",
            ),
            (
                "The user's AWS key is AKIAIOSFODNN7EXAMPLE.",
                "The user's AWS key is [REDACTED:secret].",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(redact(input), want, "input: {input}");
        }
    }

    #[test]
    fn leaves_dates_amounts_and_invalid_numbers_alone() {
        for s in [
            "The user has a meeting on 2026-02-23 at 10:00.",
            "The user paid 1,250.00 EUR in 2024.",
            "The user's order number is 4111 1111 1111 1112.",
            "The user was born in 1987 and has 3 kids.",
            "The user's flight is LH 1234 on 2026-03-01.",
            "The user has a call on 2026-02-23 10:00 with the bank.",
            "The user moved on 2019-03-01 2021-06-01.",
        ] {
            assert_eq!(redact(s), s);
        }
    }

    #[test]
    fn reject_and_allow() {
        assert_eq!(
            filter("Mail me at a@b.io", PiiPolicy::Reject),
            Filtered::Rejected(vec![PiiKind::Email])
        );
        assert_eq!(
            filter("Mail me at a@b.io", PiiPolicy::Allow),
            Filtered::Keep("Mail me at a@b.io".into())
        );
        assert_eq!(
            filter("The user likes tea.", PiiPolicy::Reject),
            Filtered::Keep("The user likes tea.".into())
        );
    }
}
