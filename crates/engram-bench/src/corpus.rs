//! Synthetic but realistic memories and queries for the throughput and latency benchmarks.
//!
//! A fact is one third-person sentence about the user or the people in their life, the way
//! engram's extraction writes them ("The user's sister Maya moved to Lisbon in March 2019.").
//! Sentences come from templates × names × relations × places × foods × numbers … picked
//! by a seeded PRNG, so a run is reproducible and no two facts are the same text. Queries
//! are questions of the kind an agent asks at recall time, about the same names and places.

use std::collections::HashSet;

/// SplitMix64: tiny, seeded, good enough to pick words.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u32, hi: u32) -> u32 {
        lo + self.below((hi - lo + 1) as usize) as u32
    }
}

const NAMES: &[&str] = &[
    "Maya", "Omar", "Lena", "Ravi", "Sofia", "Kenji", "Amara", "Lucas", "Priya", "Mateo", "Hana",
    "Jonas", "Zara", "Felix", "Aisha", "Diego", "Ingrid", "Tariq", "Elena", "Kofi", "Mei", "Noah",
    "Leila", "Anton", "Yara", "Marco", "Nadia", "Hugo", "Keiko", "Samir", "Clara", "Arjun",
    "Freya", "Pablo", "Sana", "Emil", "Lucia", "Tomas", "Ines", "Viktor", "Chloe", "Ruth",
    "Fatima", "Oskar", "Bea", "Daniel", "Mira", "Teo", "Greta", "Idris",
];
const RELATIONS: &[&str] = &[
    "sister",
    "brother",
    "mother",
    "father",
    "cousin",
    "best friend",
    "colleague",
    "manager",
    "neighbour",
    "partner",
    "aunt",
    "uncle",
    "grandmother",
    "roommate",
    "mentor",
    "daughter",
    "son",
];
const PLACES: &[&str] = &[
    "Lisbon",
    "Bengaluru",
    "Nairobi",
    "Osaka",
    "Toronto",
    "Berlin",
    "Lima",
    "Seoul",
    "Dublin",
    "Cape Town",
    "Melbourne",
    "Oslo",
    "Marseille",
    "Austin",
    "Kraków",
    "Hanoi",
    "Porto",
    "Zurich",
    "Valparaíso",
    "Edinburgh",
    "Istanbul",
    "Montreal",
    "Tbilisi",
    "Accra",
    "Kyoto",
    "Seville",
    "Helsinki",
    "Denver",
    "Bogotá",
    "Ljubljana",
    "Hamburg",
    "Chiang Mai",
    "Vancouver",
    "Naples",
    "Rotterdam",
    "Tallinn",
    "Singapore",
    "Reykjavík",
    "Cusco",
    "Granada",
];
const FOODS: &[&str] = &[
    "sushi",
    "pad thai",
    "dosa",
    "ramen",
    "tacos",
    "paella",
    "pho",
    "pierogi",
    "falafel",
    "lasagne",
    "jollof rice",
    "bibimbap",
    "ceviche",
    "croissants",
    "dumplings",
    "curry",
    "shakshuka",
    "risotto",
    "empanadas",
    "goulash",
    "dim sum",
    "burritos",
    "baklava",
    "gnocchi",
];
const DRINKS: &[&str] = &[
    "green tea",
    "black coffee",
    "oat flat whites",
    "chai",
    "sparkling water",
    "matcha",
    "espresso",
    "rooibos",
    "kombucha",
    "hot chocolate",
    "mint tea",
    "cold brew",
];
const ACTIVITIES: &[&str] = &[
    "rock climbing",
    "salsa dancing",
    "pottery",
    "trail running",
    "chess",
    "sailing",
    "birdwatching",
    "woodworking",
    "surfing",
    "painting watercolours",
    "playing the cello",
    "bouldering",
    "knitting",
    "photography",
    "swimming",
    "gardening",
    "kayaking",
    "baking bread",
    "cycling",
    "yoga",
    "playing football",
    "astronomy",
    "calligraphy",
    "fencing",
];
const JOBS: &[&str] = &[
    "nurse",
    "software engineer",
    "teacher",
    "architect",
    "pharmacist",
    "data analyst",
    "carpenter",
    "lawyer",
    "chef",
    "journalist",
    "pilot",
    "veterinarian",
    "accountant",
    "product designer",
    "electrician",
    "physiotherapist",
    "translator",
    "marine biologist",
];
const COMPANIES: &[&str] = &[
    "a hospital",
    "a startup",
    "a public school",
    "a bank",
    "a logistics company",
    "an airline",
    "a design studio",
    "a newspaper",
    "a law firm",
    "a bakery",
    "a university",
    "a bike shop",
    "an energy company",
    "a museum",
    "a game studio",
    "a clinic",
];
const PETS: &[&str] =
    &["dog", "cat", "parrot", "rabbit", "tortoise", "hamster", "beagle", "labrador", "ferret"];
const PET_NAMES: &[&str] = &[
    "Biscuit", "Pepper", "Luna", "Milo", "Nori", "Ziggy", "Olive", "Pixel", "Mango", "Juniper",
    "Tofu", "Rocket", "Maple", "Socks", "Waffles",
];
const LANGUAGES: &[&str] = &[
    "Japanese",
    "Portuguese",
    "Spanish",
    "German",
    "Korean",
    "Swahili",
    "Italian",
    "Mandarin",
    "French",
    "Turkish",
    "Hindi",
    "Arabic",
    "Polish",
    "Dutch",
];
const MONTHS: &[&str] = &[
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: &[&str] =
    &["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];
const INSTRUMENTS: &[&str] =
    &["guitar", "piano", "violin", "drums", "ukulele", "saxophone", "flute", "cello"];
const CARS: &[&str] = &[
    "a red hatchback",
    "an electric SUV",
    "a vintage Beetle",
    "a grey estate car",
    "a cargo bike",
    "a blue pickup truck",
    "a scooter",
    "a hybrid sedan",
];
const ALLERGENS: &[&str] =
    &["peanuts", "shellfish", "gluten", "lactose", "cats", "pollen", "penicillin", "sesame"];
const BOOKS: &[&str] = &[
    "Dune",
    "Middlemarch",
    "The Left Hand of Darkness",
    "Beloved",
    "Piranesi",
    "Kindred",
    "The Overstory",
    "Never Let Me Go",
    "Things Fall Apart",
    "Circe",
    "The Remains of the Day",
];

/// One fact about the user or someone close to them.
fn fact(r: &mut Rng) -> String {
    let who = |r: &mut Rng| format!("The user's {} {}", r.pick(RELATIONS), r.pick(NAMES));
    match r.below(24) {
        0 => format!(
            "{} moved to {} in {} {}.",
            who(r),
            r.pick(PLACES),
            r.pick(MONTHS),
            r.range(2005, 2025)
        ),
        1 => format!(
            "The user lives in {} and has been there for {} years.",
            r.pick(PLACES),
            r.range(1, 30)
        ),
        2 => format!("The user prefers {} over {} in the morning.", r.pick(DRINKS), r.pick(DRINKS)),
        3 => format!(
            "The user goes {} every {} with {}.",
            r.pick(ACTIVITIES),
            r.pick(WEEKDAYS),
            r.pick(NAMES)
        ),
        4 => format!("The user is allergic to {}.", r.pick(ALLERGENS)),
        5 => format!(
            "The user has a {} named {} who is {} years old.",
            r.pick(PETS),
            r.pick(PET_NAMES),
            r.range(1, 16)
        ),
        6 => format!(
            "The user is planning a {}-day trip to {} in {}.",
            r.range(3, 21),
            r.pick(PLACES),
            r.pick(MONTHS)
        ),
        7 => format!(
            "The user started learning {} in {} and practises {} minutes a day.",
            r.pick(LANGUAGES),
            r.range(2010, 2025),
            r.range(2, 12) * 5
        ),
        8 => format!(
            "{} works as a {} at {} in {}.",
            who(r),
            r.pick(JOBS),
            r.pick(COMPANIES),
            r.pick(PLACES)
        ),
        9 => format!(
            "The user's favourite dish is {} from a small place in {}.",
            r.pick(FOODS),
            r.pick(PLACES)
        ),
        10 => format!("{} has a birthday on {} {}.", who(r), r.pick(MONTHS), r.range(1, 28)),
        11 => format!("The user runs {} km on {} mornings.", r.range(3, 25), r.pick(WEEKDAYS)),
        12 => {
            format!("The user has played the {} since age {}.", r.pick(INSTRUMENTS), r.range(5, 40))
        }
        13 => format!("The user drives {} bought in {}.", r.pick(CARS), r.range(1998, 2025)),
        14 => {
            format!("The user is reading {} and is on chapter {}.", r.pick(BOOKS), r.range(1, 40))
        }
        15 => format!(
            "{} is getting married in {} in {} {}.",
            who(r),
            r.pick(PLACES),
            r.pick(MONTHS),
            r.range(2024, 2027)
        ),
        16 => format!("The user dislikes {} but loves {}.", r.pick(FOODS), r.pick(FOODS)),
        17 => format!(
            "The user works as a {} and commutes {} minutes each way.",
            r.pick(JOBS),
            r.range(5, 90)
        ),
        18 => format!(
            "The user's {} budget is {} euros per month.",
            r.pick(&["grocery", "rent", "travel", "gym", "eating-out", "savings"]),
            r.range(2, 300) * 10
        ),
        19 => format!("{} recommended {} to the user.", who(r), r.pick(BOOKS)),
        20 => format!(
            "The user took up {} in {} {} after visiting {}.",
            r.pick(ACTIVITIES),
            r.pick(MONTHS),
            r.range(2012, 2025),
            r.pick(PLACES)
        ),
        21 => format!(
            "The user has a dentist appointment on {} {} at {}:{:02}.",
            r.pick(MONTHS),
            r.range(1, 28),
            r.range(8, 18),
            r.range(0, 3) * 15
        ),
        22 => format!("{} is learning {} to visit {}.", who(r), r.pick(LANGUAGES), r.pick(PLACES)),
        _ => format!(
            "The user wants to cook {} for {} on {}.",
            r.pick(FOODS),
            r.pick(NAMES),
            r.pick(WEEKDAYS)
        ),
    }
}

/// One recall-time question.
fn query(r: &mut Rng) -> String {
    match r.below(16) {
        0 => format!("Where did the user's {} {} move?", r.pick(RELATIONS), r.pick(NAMES)),
        1 => "Where does the user live?".to_string(),
        2 => "What does the user like to drink in the morning?".to_string(),
        3 => format!("What does the user do with {} on {}?", r.pick(NAMES), r.pick(WEEKDAYS)),
        4 => "Is the user allergic to anything?".to_string(),
        5 => format!("What is the name of the user's {}?", r.pick(PETS)),
        6 => format!("When is the user travelling to {}?", r.pick(PLACES)),
        7 => format!("Which language is the user learning, {}?", r.pick(LANGUAGES)),
        8 => format!("What job does {} have?", r.pick(NAMES)),
        9 => format!("What food does the user like from {}?", r.pick(PLACES)),
        10 => format!("When is {}'s birthday?", r.pick(NAMES)),
        11 => "How far does the user run?".to_string(),
        12 => format!("Does the user play the {}?", r.pick(INSTRUMENTS)),
        13 => format!("Who is getting married in {}?", r.pick(PLACES)),
        14 => format!("Has anyone recommended {} to the user?", r.pick(BOOKS)),
        _ => format!("Does the user have hobbies like {}?", r.pick(ACTIVITIES)),
    }
}

/// `n` distinct facts, reproducible for a given `seed`.
pub fn facts(n: usize, seed: u64) -> Vec<String> {
    let mut r = Rng::new(seed);
    let mut seen = HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let f = fact(&mut r);
        if seen.insert(f.clone()) {
            out.push(f);
        }
    }
    out
}

/// `n` questions (may repeat), reproducible for a given `seed`.
pub fn queries(n: usize, seed: u64) -> Vec<String> {
    let mut r = Rng::new(seed ^ 0x5EED_0F0E_41E5);
    (0..n).map(|_| query(&mut r)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_are_distinct_and_reproducible() {
        let a = facts(5000, 7);
        let b = facts(5000, 7);
        assert_eq!(a, b);
        assert_eq!(a.iter().collect::<HashSet<_>>().len(), 5000);
        assert!(a.iter().all(|f| f.ends_with('.') && f.len() < 200));
    }

    #[test]
    fn queries_are_questions() {
        let q = queries(100, 1);
        assert_eq!(q.len(), 100);
        assert!(q.iter().all(|q| q.ends_with('?')));
    }
}
