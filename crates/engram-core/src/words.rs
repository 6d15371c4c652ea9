//! Function words: the words of a query that name no topic. Keyword queries leave them out
//! (`engram_store::text::query_terms`), and the built-in embedder does not count them when
//! it asks how much of a query its vocabulary knows (a German question is mostly words of
//! three letters that English spells too: "was", "ist", "die", "des").

/// English function words dropped from keyword queries (never from the index, which stays
/// language-neutral). They carry no meaning of their own, yet in a small store a word like
/// "is" can be rare enough to get a real BM25 weight and pull an unrelated fact to the top of
/// the keyword list. Other languages' in [`OTHER_STOPWORDS`].
pub const STOPWORDS: &[&str] = &[
    "a", "about", "am", "an", "and", "are", "as", "at", "be", "been", "but", "by", "can", "could",
    "did", "do", "does", "for", "from", "had", "has", "have", "he", "her", "him", "his", "how",
    "i", "if", "in", "into", "is", "it", "its", "me", "my", "of", "on", "or", "our", "she", "so",
    "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "those",
    "to", "us", "was", "we", "were", "what", "when", "where", "which", "who", "whom", "whose",
    "why", "will", "with", "would", "you", "your",
];

/// Question words, articles, pronouns and auxiliaries of German, French, Spanish, Italian,
/// Portuguese and Dutch, dropped from keyword queries like [`STOPWORDS`], except those that
/// are also English words or names (German "die", "den", "hat", "war", "bin"; French "son",
/// "pour", "ai"; Italian "come", "dove"; Spanish "sin", "con", "era", "hay", "al"; "no",
/// "un", "van", "os"), which stay and are left to the
/// document-frequency rule (a term in half the rows or more is dropped). A question's own
/// words ("Wie heißt seine Tochter?") are rarely in the facts that answer it, and each word
/// no row holds weighs the most of the query (`term_weight` of the stores): with them a German question
/// held under a fifth of its keyword weight in the fact it asked about, under the default
/// score (a tester's finding).
#[rustfmt::skip]
pub const OTHER_STOPWORDS: &[&str] = &[
    // German
    "wie", "wo", "wer", "wen", "wem", "wann", "warum", "wieso", "weshalb", "welche", "welcher",
    "welches", "welchen", "woher", "wohin", "der", "das", "dem", "des", "ein", "eine", "einen",
    "einem", "einer", "eines", "ist", "sind", "bist", "hatte", "haben", "habe", "wird", "werden",
    "wurde", "ich", "du", "er", "sie", "es", "wir", "ihr", "mich", "mir", "dich", "dir", "ihn",
    "ihm", "uns", "euch", "sein", "seine", "seinen", "seinem", "seiner", "ihre", "ihren", "ihrem",
    "ihrer", "mein", "meine", "meinen", "meinem", "meiner", "dein", "deine", "und", "oder", "aber",
    "nicht", "zu", "zum", "zur", "im", "ins", "vom", "beim", "für", "über", "auf", "nach", "von",
    "bei", "dass", "denn", "doch", "noch", "schon", "gibt", "gerne", "gern",
    // French
    "qui", "quoi", "où", "comment", "quand", "pourquoi", "quel", "quelle", "quels", "quelles",
    "le", "la", "les", "des", "du", "une", "est", "sont", "était", "avez", "avait", "et", "ou",
    "dans", "avec", "sa", "ses", "leur", "leurs", "ce", "cette", "ces", "il", "ils", "elles", "je",
    "tu", "nous", "vous", "mon", "mes", "ta", "tes", "pas", "ne", "au", "aux", "qu", "que",
    "quelqu",
    // Spanish and Portuguese
    "qué", "cómo", "como", "dónde", "donde", "cuándo", "cuando", "cuál", "cual", "cuáles", "quién",
    "quien", "quiénes", "el", "los", "las", "del", "una", "unos", "unas", "es", "está", "están",
    "estaba", "fue", "ha", "su", "sus", "mi", "mis", "tu", "tus", "y", "de", "en", "por", "para",
    "se", "lo", "le", "les", "nos", "yo", "él", "ellos", "ellas", "usted", "este", "esta", "esto",
    "ese", "esa", "muy", "más", "pero", "quem", "onde", "qual", "quais", "um", "uma", "é", "são",
    "foi", "da", "das", "na", "nos", "em", "com", "seu", "sua", "seus", "suas", "meu", "minha",
    "você",
    // Italian
    "che", "cosa", "quando", "perché", "quale", "quali", "il", "gli", "è", "sono", "di", "della",
    "dei", "delle", "nel", "nella", "per", "suo", "suoi", "mio", "lui", "lei", "loro",
    // Dutch
    "wat", "waar", "wanneer", "waarom", "welk", "welke", "het", "een", "zijn", "heeft", "hij",
    "zij", "wij", "jij", "mijn", "haar", "niet", "ook", "naar", "voor",
];

/// Function words of the languages of [`OTHER_STOPWORDS`] that are English words or names too
/// ("die", "son", "come"): left in a query, unless it is written in one of those languages
/// (it holds another of their function words: "Was ist die Lieblingsfarbe des Nutzers?").
pub const AMBIGUOUS: &[&str] = &[
    "die", "den", "hat", "war", "bin", "son", "pour", "ai", "come", "dove", "chi", "uno", "con",
    "sin", "era", "hay", "al", "han", "ella", "elle", "os", "dos", "nas", "van", "hoe", "no", "un",
    "ma", "ton", "sue", "mia", "mit", "aus",
];

/// Whether `word` (lowercased) is a function word of one of the languages above.
pub fn is_function_word(word: &str) -> bool {
    STOPWORDS.contains(&word) || OTHER_STOPWORDS.contains(&word)
}
