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
    /// Store this text: unchanged (`redacted` empty), or with each finding replaced by
    /// `[REDACTED:<kind>]` (the kinds replaced, in order, so the caller can be told).
    Keep { text: String, redacted: Vec<PiiKind> },
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
    ]
});
/// `password: <value>` and the like: only the value is redacted, and only a value that
/// looks like a secret ([`secret_like`]), so "The user's secret is localmode." stays as is.
static KEYED_SECRET: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)\b(?:api[_-]?key|secret|token|password|passwd|passcode|pin)\b\s*(?:is|[:=])\s*(\S{6,})",
    )
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
static PHONE: LazyLock<Regex> = LazyLock::new(|| re(r"(?:\+|\(|\b)\d[\d\s().-]{7,}\d\b"));
/// Words that make a number right after them a phone number.
static PHONE_CONTEXT: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)\b(phone|mobile|cell|cellphone|tel|telephone|whatsapp|signal|fax|landline|call|text|sms|reach|dial|contact)\b",
    )
});
/// Words that make a number right after them an identifier of something else.
static NOT_PHONE_CONTEXT: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)\b(order|invoice|tracking|ticket|booking|reservation|reference|ref|confirmation|account|customer|case|serial|flight|policy|membership|loyalty|receipt|transaction|parcel|shipment|item|product|model|part|room|employee|student|badge)\b",
    )
});
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
    // An IBAN is ASCII; the pattern's `\d` also takes other scripts' digits ("QN৪947…"),
    // which would cut the string inside a character below.
    if !(15..=34).contains(&s.len()) || !s.is_ascii() {
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
    for c in KEYED_SECRET.captures_iter(text) {
        if let Some(v) = c.get(1) {
            let value = v.as_str().trim_end_matches(['.', ',', ';', '!', '?', ')', '"', '\'']);
            if secret_like(value) {
                push(v.start(), v.start() + value.len(), PiiKind::Secret, &mut found);
            }
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
        if (9..=15).contains(&digits) && !ISO_DATE.is_match(s) && phone_like(s, &text[..m.start()])
        {
            push(m.start(), m.end(), PiiKind::Phone, &mut found);
        }
    }
    found.sort_by_key(|f| f.0);
    found
}

/// Is this run of digits a phone number? International form (`+39 …`) always is. Otherwise
/// the words just before it decide: "order number 482913456" is not, "call me at
/// 347 123 4567" is; with neither kind of word, a number written in phone groups
/// (`(555) 123-4567`, `347 123 4567`, `555-123-4567`) is, a bare run of digits is not.
fn phone_like(number: &str, before: &str) -> bool {
    if number.starts_with('+') {
        return true;
    }
    // The last few words before the number.
    let start = before.char_indices().rev().nth(40).map_or(0, |(i, _)| i);
    let window = &before[start..];
    let phone_at = PHONE_CONTEXT.find_iter(window).last().map(|m| m.start());
    let other_at = NOT_PHONE_CONTEXT.find_iter(window).last().map(|m| m.start());
    match (phone_at, other_at) {
        (Some(p), Some(o)) => return p > o,
        (Some(_), None) => return true,
        (None, Some(_)) => return false,
        (None, None) => {}
    }
    let groups = number.split(|c: char| !c.is_ascii_digit()).filter(|g| !g.is_empty()).count();
    groups >= 3 || number.starts_with('(')
}

/// Does a value after `password:` look like a secret rather than a word? Long values do;
/// shorter ones need two kinds of characters (letters and digits, lower and upper case,
/// or symbols): "hunter22" and "Tr0ub4dor" do, "localmode" does not.
fn secret_like(v: &str) -> bool {
    if v.chars().count() >= 16 && !v.contains(char::is_whitespace) {
        return true;
    }
    let classes = [
        v.chars().any(|c| c.is_lowercase()),
        v.chars().any(|c| c.is_uppercase()),
        v.chars().any(|c| c.is_ascii_digit()),
        v.chars().any(|c| !c.is_alphanumeric()),
    ];
    classes.iter().filter(|x| **x).count() >= 2
}

/// Apply a policy to one text.
pub fn filter(text: &str, policy: PiiPolicy) -> Filtered {
    if policy == PiiPolicy::Allow {
        return Filtered::Keep { text: text.to_string(), redacted: vec![] };
    }
    let found = find(text);
    if found.is_empty() {
        return Filtered::Keep { text: text.to_string(), redacted: vec![] };
    }
    if policy == PiiPolicy::Reject {
        return Filtered::Rejected(found.iter().map(|f| f.2).collect());
    }
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    let mut redacted = Vec::with_capacity(found.len());
    for (s, e, k) in found {
        out.push_str(&text[last..s]);
        out.push_str(&format!("[REDACTED:{}]", k.as_str()));
        redacted.push(k);
        last = e;
    }
    out.push_str(&text[last..]);
    Filtered::Keep { text: out, redacted }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redact(s: &str) -> String {
        match filter(s, PiiPolicy::Redact) {
            Filtered::Keep { text, .. } => text,
            Filtered::Rejected(k) => panic!("redact never rejects: {k:?}"),
        }
    }

    #[test]
    fn digits_of_other_scripts_in_an_iban_shape_do_not_panic() {
        // Found by the hostile-input property test: a Bengali digit inside an IBAN shape.
        assert!(!iban_ok("QN৪94792661747"));
        assert!(!iban_ok("QN৪947926617470000"));
        let _ = filter("call QN৪94792661747 now", PiiPolicy::Redact);
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
            // Issue 10: the keyword stays, only a secret-looking value goes.
            ("The user's password is hunter22.", "The user's password is [REDACTED:secret]."),
            ("The wifi password: Tr0ub4dor&3", "The wifi password: [REDACTED:secret]"),
            // Phone numbers: by context word, by international form, by phone grouping.
            ("Call the user at 3471234567.", "Call the user at [REDACTED:phone]."),
            ("The user's mobile is 482913456.", "The user's mobile is [REDACTED:phone]."),
            ("The user's number is (555) 123-4567.", "The user's number is [REDACTED:phone]."),
            ("Reach the user on 555-123-4567.", "Reach the user on [REDACTED:phone]."),
            (
                "The user's phone, not the order 4821, is +1 212 555 0100.",
                "The user's phone, not the order 4821, is [REDACTED:phone].",
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
            // Issue 10: identifiers that are not phone numbers, and words after "secret".
            "The user's order number is 482913456.",
            "The user's tracking number is 1Z 999 AA1 0123 4567 84.",
            "The user's booking reference is 482 913 4567.",
            "The user's invoice 2024-000123456 is paid.",
            "The user secret is localmode.",
            "The user's favourite token is friendship.",
            "The user's password is secret.",
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
            Filtered::Keep { text: "Mail me at a@b.io".into(), redacted: vec![] }
        );
        assert_eq!(
            filter("The user likes tea.", PiiPolicy::Reject),
            Filtered::Keep { text: "The user likes tea.".into(), redacted: vec![] }
        );
    }
}
