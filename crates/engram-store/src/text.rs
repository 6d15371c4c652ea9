//! Keyword-query handling shared by both stores.
//!
//! A free-text query becomes a list of terms the same way for SQLite and PostgreSQL
//! ([`query_terms`]): words are runs of alphanumeric characters (Unicode, any script),
//! lowercased, deduplicated, at most 64, without function words (English ones, and those of
//! German, French, Spanish, Portuguese, Italian and Dutch: `engram_core::words`; a query of
//! English function words alone has no keyword: it names no topic). Each term then matches its word forms by truncation ([`match_term`]): a word
//! of four characters or more loses up to three final characters (never going under four)
//! and matches every indexed word that starts with what is left, so "painting" finds
//! "painted" and "paints" — in any language with suffixes, with no stemmer and no word list.
//! SQLite turns them into an FTS5 query ([`fts_query`]); PostgreSQL additionally
//! folds diacritics ([`fold_diacritics`]) on both sides, because FTS5's tokenizer does that
//! itself (`remove_diacritics 2`) and PostgreSQL's `simple` configuration does not, and it
//! indexes [`index_text`] (the content split exactly like a query) so that what matches does
//! not depend on the database's locale.
//!
//! A message is indexed with its context ([`CONTEXT_WEIGHT`]): the words of the two messages
//! before it in its conversation, in a field of their own.
//!
//! Text written without spaces (Chinese, Japanese; Korean words carry their particles) is
//! split by characters ([`words`]): a run of such characters is indexed as each character
//! and each overlapping pair (`北京烤鸭` → 北, 京, 烤, 鸭, 北京, 京烤, 烤鸭), the way
//! Lucene's CJK bigram filter does with unigrams kept, and a query asks for the pairs of
//! its runs, split at function characters ([`query_terms`]). So `北京` finds
//! `用户住在北京`, by the index and in every source. PostgreSQL gets the split through
//! [`index_text`]; SQLite's FTS5 tokenizer cannot split a run, so a row with such
//! characters carries [`keyword_text`] for its index (migration 19).

use unicode_normalization::UnicodeNormalization;

pub use engram_core::words::{AMBIGUOUS, OTHER_STOPWORDS, STOPWORDS};

/// The words of a query as FTS5 sees them (lowercased, deduplicated, at most 64), without
/// function words ([`STOPWORDS`]; none left: no terms, and the keyword list is empty).
/// Other languages' function words ([`OTHER_STOPWORDS`], and [`AMBIGUOUS`] ones in a query
/// that holds one of those) leave it too, except when they are
/// all the query holds besides English ones ("Como", "lo mein", "who is Una": they are what
/// it asks about) or written with a capital inside a sentence, as names are ("my neighbour
/// Del", "Lake Como"; found by a tester).
pub fn query_terms(q: &str) -> Vec<String> {
    let q = &*fold_width(q);
    let mut terms: Vec<String> = Vec::new();
    let mut named: Vec<String> = Vec::new();
    let runs = q.split(|c: char| !c.is_alphanumeric()).filter(|t| !t.is_empty());
    'runs: for run in runs.filter(|t| !is_clitic_tail(q, t) && !is_elided_head(q, t)) {
        let name = run.chars().next().is_some_and(char::is_uppercase) && !opens_a_sentence(q, run);
        for t in query_pieces(run) {
            let t = t.to_lowercase();
            if name {
                named.push(t.clone());
            }
            if !terms.contains(&t) {
                terms.push(t);
            }
            if terms.len() == 64 {
                break 'runs;
            }
        }
    }
    terms.retain(|t| !STOPWORDS.contains(&t.as_str()));
    // A query in another language (one of its function words, not a name) loses the words
    // that are function words there and English words too ("die", "den", "son").
    let other = terms.iter().any(|t| OTHER_STOPWORDS.contains(&t.as_str()) && !named.contains(t));
    let foreign = |t: &String| {
        (OTHER_STOPWORDS.contains(&t.as_str()) || other && AMBIGUOUS.contains(&t.as_str()))
            && !named.contains(t)
    };
    if terms.iter().any(|t| !foreign(t)) {
        terms.retain(|t| !foreign(t));
    }
    terms
}

/// Whether `word` (a slice of `q`) is the first word of `q` or of a sentence in it.
fn opens_a_sentence(q: &str, word: &str) -> bool {
    let start = word.as_ptr() as usize - q.as_ptr() as usize;
    q[..start]
        .trim_end_matches(|c: char| c.is_whitespace() || "\"'«“„([".contains(c))
        .chars()
        .next_back()
        .is_none_or(|c| ".!?¿¡:;".contains(c))
}

/// Chinese function characters, which split a query's run like punctuation, as English
/// function words leave keyword queries: "上海的天气怎么样" asks about 上海 and 天气, and the
/// pairs across them (海的, 的天, 气怎) are words of no text. Japanese hiragana, which mostly
/// writes grammar (は, を, に, でした), split it too. Not 都 ("all", but also the 都 of
/// 京都 and 成都: a tester's 京都 found 北京 and 東京 through 京 alone).
const FUNCTION_CHARS: &str =
    "的了是在和与及或也就而吗呢吧啊呀这那哪怎么什样为把被给我你他她它们个很还着过";

fn splits_a_query(c: char) -> bool {
    FUNCTION_CHARS.contains(c) || ('\u{3040}'..='\u{309F}').contains(&c)
}

/// The terms of one run of a query: itself, or for characters written without spaces the
/// overlapping pairs of each stretch between function characters (a lone character as
/// itself).
fn query_pieces(run: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for (wide, seg) in segments(run) {
        if !wide {
            out.push(seg);
            continue;
        }
        let before = out.len();
        for stretch in seg.split(splits_a_query).filter(|x| !x.is_empty()) {
            out.extend(pairs(stretch));
        }
        // A word written in kana alone ("ねこ", "すし") is all separators: its own pairs.
        if out.len() == before && seg.chars().any(|c| ('\u{3040}'..='\u{309F}').contains(&c)) {
            out.extend(pairs(seg));
        }
    }
    out
}

/// The overlapping pairs of characters of `s`, or `s` itself when it is one character.
fn pairs(s: &str) -> Vec<&str> {
    let b = char_bounds(s);
    if b.len() == 2 {
        return vec![s];
    }
    b.windows(3).map(|w| &s[w[0]..w[2]]).collect()
}

/// A run cut where it passes between characters written without spaces
/// ([`is_wide`]) and others: (`wide`, slice) in order.
fn segments(run: &str) -> impl Iterator<Item = (bool, &str)> {
    let mut rest = run;
    std::iter::from_fn(move || {
        let first = rest.chars().next()?;
        let wide = is_wide(first);
        let end =
            rest.char_indices().find(|(_, c)| is_wide(*c) != wide).map_or(rest.len(), |x| x.0);
        let (seg, tail) = rest.split_at(end);
        rest = tail;
        Some((wide, seg))
    })
}

/// The byte offsets of `s`'s characters, and its length.
fn char_bounds(s: &str) -> Vec<usize> {
    s.char_indices().map(|(i, _)| i).chain(std::iter::once(s.len())).collect()
}

/// Shorter words match only themselves; words of this many characters match as prefixes,
/// longer words are cut, never below it.
pub const MATCH_MIN_CHARS: usize = 4;
/// At most this many final characters are cut from a longer word.
pub const MATCH_CUT_CHARS: usize = 3;

/// One query term as both stores match it: the word itself, or a prefix that matches every
/// indexed word starting with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchTerm {
    pub text: String,
    pub prefix: bool,
}

impl MatchTerm {
    /// The FTS5 phrase: `"text"` or the prefix query `"text"*`. Terms are runs of
    /// alphanumeric characters, so they never contain a quote.
    pub fn fts5(&self) -> String {
        if self.prefix { format!("\"{}\"*", self.text) } else { format!("\"{}\"", self.text) }
    }
}

/// How a query word matches (language-neutral truncation): a word of more than
/// [`MATCH_MIN_CHARS`] characters loses up to [`MATCH_CUT_CHARS`] final characters, never
/// going under [`MATCH_MIN_CHARS`], and matches as a prefix ("painting" → `paint*`, which
/// finds "painted", "paints", "painter"); a word of exactly [`MATCH_MIN_CHARS`] matches as
/// a prefix uncut ("live" → `live*`, which finds "lives" and "lived", as "lives" finds
/// "live": "where does the user live?" finds "The user lives in Bengaluru."); shorter
/// words, and words with a digit (numbers, dates, codes), match exactly.
///
/// Measured on LoCoMo (turn Recall@10, BM25 list alone 0.606 → 0.634; see
/// `benches/README.md`): it recovers inflected forms the way a stemmer does (Porter: 0.645)
/// without knowing the language. It also matches some unrelated words sharing the first
/// letters ("caroline" → `carol*`); BM25 weighs such a prefix by how many rows it matches.
pub fn match_term(word: &str) -> MatchTerm {
    let n = word.chars().count();
    let keep = MATCH_MIN_CHARS.max(n.saturating_sub(MATCH_CUT_CHARS));
    if n >= MATCH_MIN_CHARS && !word.chars().any(char::is_numeric) {
        MatchTerm { text: word.chars().take(keep).collect(), prefix: true }
    } else {
        MatchTerm { text: word.to_string(), prefix: false }
    }
}

/// [`query_terms`] as [`match_term`]s, deduplicated.
pub fn match_terms(q: &str) -> Vec<MatchTerm> {
    let mut out: Vec<MatchTerm> = Vec::new();
    for t in query_terms(q) {
        let m = match_term(&t);
        if !out.contains(&m) {
            out.push(m);
        }
    }
    out
}

/// Turn free text into an FTS5 query that can never be a syntax error: every term becomes a
/// quoted phrase or prefix query ([`match_terms`]), OR-ed (BM25 ranks documents matching more
/// and rarer terms first).
pub fn fts_query(q: &str) -> Option<String> {
    let terms = match_terms(q);
    if terms.is_empty() {
        None
    } else {
        Some(terms.iter().map(MatchTerm::fts5).collect::<Vec<_>>().join(" OR "))
    }
}

/// The words of indexed text: runs of alphanumeric characters, where characters written
/// without spaces ([`is_wide`]) give each character and each overlapping pair of them.
fn words(s: &str) -> impl Iterator<Item = &str> {
    s.split(|c: char| !c.is_alphanumeric()).filter(|t| !t.is_empty()).flat_map(|run| {
        let mut out = Vec::new();
        if !run.chars().any(is_wide) {
            out.push(run);
            return out;
        }
        for (wide, seg) in segments(run) {
            if wide {
                let b = char_bounds(seg);
                out.extend(b.windows(2).map(|w| &seg[w[0]..w[1]]));
                out.extend(b.windows(3).map(|w| &seg[w[0]..w[2]]));
            } else {
                out.push(seg);
            }
        }
        out
    })
}

/// Fullwidth forms of ASCII (`１２月５日`, `ＡＢＣ`), written by Chinese and Japanese input
/// methods, as ASCII: `12月5日` and `１２月５日` are the same words (found by a tester).
pub fn fold_width(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(is_fullwidth) {
        return std::borrow::Cow::Borrowed(s);
    }
    let narrow = |c: char| char::from_u32(c as u32 - 0xFEE0).unwrap_or(c);
    s.chars().map(|c| if is_fullwidth(c) { narrow(c) } else { c }).collect()
}

fn is_fullwidth(c: char) -> bool {
    ('\u{FF01}'..='\u{FF5E}').contains(&c)
}

/// What SQLite's keyword index reads of a row instead of its text, when the text has
/// characters written without spaces (FTS5's tokenizer keeps a run of them as one word):
/// its [`index_text`]. `None` for every other text, indexed as it is.
pub fn keyword_text(text: &str) -> Option<String> {
    text.chars().any(|c| is_wide(c) || is_fullwidth(c)).then(|| index_text(&[text]))
}

/// Whether `word` (a slice of `q`) is a short tail glued to the word before it by an
/// apostrophe: the "s" of "user's", the "t" of "don't", the "ll" of "I'll". Split off as
/// words of their own they match almost every fact ("the user's …") and only slow the
/// query; a longer tail ("l'amour" → "amour") is a real word and stays.
fn is_clitic_tail(q: &str, word: &str) -> bool {
    let start = word.as_ptr() as usize - q.as_ptr() as usize;
    let mut before = q[..start].chars().rev();
    word.chars().count() <= 2
        && matches!(before.next(), Some('\'' | '\u{2019}'))
        && before.next().is_some_and(char::is_alphanumeric)
}

/// Whether `word` (a slice of `q`) is an elided article or pronoun glued to the word after
/// it by an apostrophe: the "l" of French "l'utilisateur", the "d" of "d'abord", the "qu" of
/// "qu'il", Italian "l'anno". Alone they match nothing the query is about.
fn is_elided_head(q: &str, word: &str) -> bool {
    let end = word.as_ptr() as usize - q.as_ptr() as usize + word.len();
    let mut after = q[end..].chars();
    (word.chars().count() == 1 || word.eq_ignore_ascii_case("qu"))
        && matches!(after.next(), Some('\'' | '\u{2019}'))
        && after.next().is_some_and(char::is_alphanumeric)
}

/// Remove the combining diacritical marks (U+0300–U+036F) of a lowercased word: "café" and
/// "cafe" become the same term, as with FTS5's `remove_diacritics 2`. Other combining marks
/// (e.g. the kana voicing marks) are meaningful and kept.
pub fn fold_diacritics(word: &str) -> String {
    if word.is_ascii() {
        return word.to_string();
    }
    word.nfd().filter(|c| !('\u{300}'..='\u{36f}').contains(c)).nfc().collect()
}

/// The searchable form of a text for PostgreSQL: its words, lowercased, diacritics folded,
/// joined by single spaces (fed to `to_tsvector('simple', …)`).
pub fn index_text(parts: &[&str]) -> String {
    let mut out = String::new();
    for p in parts {
        for w in words(&fold_width(p)) {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(&fold_diacritics(&w.to_lowercase()));
        }
    }
    out
}

/// The weight of a message's context (the words of the two messages before it in its
/// conversation, each cut to its last 800 characters, those nearest to it: the migrations
/// that build the index and its triggers spell it out) in its keyword score,
/// against 1 for its own words: BM25F's field weight, so a short answer ("Yes, last
/// Saturday") is found by the words of the question it answers, below a message that says
/// them itself. Coverage ([`QueryWeights::coverage`]) and the drop of common terms read the
/// message's own words only. 0.2–0.3 is a plateau on LoCoMo; 1 (one three-message document)
/// loses (`benches/README.md`, "the keyword index with each message's context").
pub const CONTEXT_WEIGHT: f64 = 0.25;

pub use engram_core::retrieval::{MIN_ROWS_FOR_IDF, idf, is_wide, term_weight};

/// A query's keyword weight: its terms as matched ([`match_term`]), each with its weight in
/// the searched corpus ([`term_weight`]). A term in half the rows or more (of a scope of
/// [`MIN_ROWS_FOR_IDF`] rows or more) has almost none.
#[derive(Debug, Clone, Default)]
pub struct QueryWeights {
    pub terms: Vec<(MatchTerm, f64)>,
}

impl QueryWeights {
    /// The share of the query's keyword weight a text holds: the IDF of the query terms
    /// found in `parts` (as the index splits them, diacritics folded; a prefix term matches
    /// any word starting with it) over the IDF of all of them. 0 to 1: a text with every
    /// query word has 1, one with only the rarest of two has more than half, and how often
    /// a word occurs or how long the text is does not count. Comparable across queries, unlike
    /// a BM25 score.
    pub fn coverage(&self, parts: &[&str]) -> f64 {
        let total: f64 = self.terms.iter().map(|t| t.1).sum();
        if total <= 0.0 {
            return 0.0;
        }
        let text = index_text(parts);
        let tokens: Vec<&str> = text.split(' ').collect();
        let found: f64 = self
            .terms
            .iter()
            .filter(|(t, _)| {
                let want = fold_diacritics(&t.text);
                tokens.iter().any(|w| if t.prefix { w.starts_with(&want) } else { *w == want })
            })
            .map(|t| t.1)
            .sum();
        (found / total).clamp(0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_words_of_several_languages_leave_the_query() {
        assert_eq!(query_terms("Wie heißt seine Tochter?"), ["heißt", "tochter"]);
        assert_eq!(query_terms("Où habite l'utilisateur ?"), ["habite", "utilisateur"]);
        assert_eq!(query_terms("¿Dónde vive el usuario?"), ["vive", "usuario"]);
        // Words that are English too stay: they may be what the query is about.
        assert_eq!(query_terms("when did the dog die"), ["dog", "die"]);
        assert_eq!(query_terms("my son's van"), ["son", "van"]);
        assert_eq!(
            query_terms("Qu'a dit l'utilisateur d'abord ?"),
            ["dit", "utilisateur", "abord"]
        );
        assert_eq!(query_terms("o'clock"), ["clock"]);
    }

    #[test]
    fn coverage_is_the_share_of_the_query_weight_a_text_holds() {
        let w = QueryWeights {
            terms: vec![
                (match_term("quantum"), 3.0),
                (match_term("lattice"), 1.0),
                (match_term("café"), 0.0),
            ],
        };
        assert_eq!(w.coverage(&["A lattice of Lattices, lattice."]), 0.25);
        assert_eq!(w.coverage(&["Quantum LATTICE"]), 1.0);
        // Word forms through the prefix ("quant*"), but not inside another word.
        assert_eq!(w.coverage(&["quantities", "sublattice"]), 0.75);
        assert_eq!(w.coverage(&["nothing here"]), 0.0);
        assert_eq!(QueryWeights::default().coverage(&["anything"]), 0.0);
        // Diacritics folded on both sides.
        let w = QueryWeights { terms: vec![(match_term("café"), 2.0)] };
        assert_eq!(w.coverage(&["Un CAFE noir"]), 1.0);
        assert!(idf(100.0, 0.0) > idf(100.0, 10.0) && idf(100.0, 60.0) == 1e-6);
    }

    #[test]
    fn terms_drop_function_words() {
        assert_eq!(query_terms("What is the user's favourite Tea?"), ["user", "favourite", "tea"]);
        // Function words alone name no topic: no keyword ("is" alone found every row with
        // it, at full coverage).
        assert!(query_terms("what is it").is_empty());
        assert!(query_terms("in").is_empty());
        // Apostrophe tails go, in either apostrophe; a real word after one stays.
        assert_eq!(
            query_terms("Maya’s cat doesn't bite, I'll see"),
            ["maya", "cat", "doesn", "bite", "see"]
        );
        // An elided article before one goes too.
        assert_eq!(query_terms("l'amour d'Anna"), ["amour", "anna"]);
        assert_eq!(query_terms("s t"), ["s", "t"]);
        assert!(query_terms(" \"*(): ").is_empty());
        assert_eq!(fts_query("NEAR(a b) OR c*"), Some("\"near\"* OR \"b\" OR \"c\"".into()));
    }

    #[test]
    fn long_words_match_their_forms_short_words_and_numbers_match_exactly() {
        let m = |w: &str| {
            let t = match_term(w);
            (t.text, t.prefix)
        };
        assert_eq!(m("painting"), ("paint".into(), true));
        assert_eq!(m("painted"), ("pain".into(), true));
        assert_eq!(m("paints"), ("pain".into(), true));
        assert_eq!(m("tea"), ("tea".into(), false));
        assert_eq!(m("cars"), ("cars".into(), true), "four letters: a prefix, uncut");
        assert_eq!(m("live"), ("live".into(), true));
        assert_eq!(m("car"), ("car".into(), false));
        assert_eq!(m("москве"), ("моск".into(), true));
        assert_eq!(m("2023"), ("2023".into(), false));
        assert_eq!(m("123456"), ("123456".into(), false));
        assert_eq!(m("18th"), ("18th".into(), false));
        assert_eq!(m("covid19"), ("covid19".into(), false));
        assert_eq!(
            fts_query("Which paintings did she paint, painting in 2023?"),
            Some("\"painti\"* OR \"pain\"* OR \"paint\"* OR \"2023\"".into())
        );
        assert_eq!(fts_query("painting Painting"), Some("\"paint\"*".into()), "once");
        assert_eq!(fts_query("tea"), Some("\"tea\"".into()));
    }

    #[test]
    fn index_text_splits_like_queries_and_folds_accents() {
        assert_eq!(
            index_text(&["Café résumé: a@b.com Москва 東京に住ん", "tool_name"]),
            "cafe resume a b com москва 東 京 に 住 ん 東京 京に に住 住ん tool name"
        );
        assert_eq!(keyword_text("The user lives in Zürich."), None);
        assert_eq!(keyword_text("iPhone手机").as_deref(), Some("iphone 手 机 手机"));
        assert_eq!(fold_diacritics("zürich"), "zurich");
        assert_eq!(fold_diacritics("が"), "が");
    }

    #[test]
    fn unspaced_queries_ask_for_pairs_between_function_characters() {
        assert_eq!(query_terms("北京"), ["北京"]);
        assert_eq!(query_terms("北京烤鸭 in Berlin?"), ["北京", "京烤", "烤鸭", "berlin"]);
        assert_eq!(query_terms("猫"), ["猫"]);
        assert_eq!(query_terms("東京に住んでいる"), ["東京", "住"]);
        assert_eq!(query_terms("上海的天气怎么样"), ["上海", "天气"]);
        assert_eq!(query_terms("ユーザーは東京"), ["ユー", "ーザ", "ザー", "東京"]);
        assert_eq!(query_terms("서울에서"), ["서울", "울에", "에서"]);
        assert!(query_terms("我的").is_empty(), "function characters alone name nothing");
        // A word in kana alone is found by its own pairs (found by a tester: ねこ, すし).
        assert_eq!(query_terms("ねこ"), ["ねこ"]);
        // Fullwidth digits are digits.
        assert_eq!(query_terms("１２月５日"), query_terms("12月5日"));
        assert_eq!(index_text(&["生日是１２月５日"]), index_text(&["生日是12月5日"]));
        assert_eq!(query_terms("うちのねこ"), ["うち", "ちの", "のね", "ねこ"]);
        let text = index_text(&["うちのねこはとてもかわいいです。"]);
        assert!(text.split(' ').any(|w| w == "ねこ"), "{text}");
        assert_eq!(query_terms("住在京都"), ["住", "京都"], "京都 is Kyoto, not 京");
        // Each query pair is a word of the text that holds it.
        let text = index_text(&["用户住在北京，喜欢吃北京烤鸭。"]);
        let words: Vec<&str> = text.split(' ').collect();
        for t in query_terms("北京烤鸭") {
            assert!(words.contains(&t.as_str()), "{t} in {text}");
        }
        let w =
            QueryWeights { terms: vec![(match_term("上海"), 1.0), (match_term("天气"), 1.0)] };
        assert_eq!(w.coverage(&["用户在上海工作。"]), 0.5);
    }
}
