//! Credential-shaped values in text, found with the rule set of a maintained scanner.
//!
//! sallyport's scrubber removes the secrets its vault knows. An upstream's answer can carry
//! other secrets too: someone else's token in an error message, a private key a command
//! printed. This crate finds those by their shape, with the default rule set of
//! [Gitleaks](https://github.com/gitleaks/gitleaks) v8.30.1 (221 rules: private-key blocks,
//! JWTs, and the token formats of GitHub, GitLab, Slack, AWS, Stripe, Google, OpenAI,
//! Anthropic and some two hundred other providers, plus Gitleaks' generic `key = value`
//! rule). sallyport's executor uses it through `sallyport_kernel::inspect::SecretScanner`
//! (the `secret-rules` feature of the kernel and of `sallyport-core`, where it is a default).
//!
//! # Why this rule set
//!
//! Gitleaks is the most widely used open-source secret scanner; its rules are maintained
//! upstream with true- and false-positive test cases for each provider, and carry the
//! keyword prefilters, entropy floors and allowlists (placeholders such as `${TOKEN}`,
//! `EXAMPLE` keys) that keep false positives down. Writing patterns by hand would mean
//! maintaining two hundred formats ourselves. The rules are checked in as data
//! (`rules/gitleaks-v8.30.1.json`, MIT, licence in `rules/LICENSE-gitleaks`): the JSON form
//! of Gitleaks' `config/gitleaks.toml` at commit `83d9cd6` that the Apache-2.0 crate
//! `keyspoor` 0.1.4 ships (see `rules/README.md` for the hashes). JSON needs no TOML parser,
//! and the patterns are RE2 syntax, which Rust's `regex` compiles unchanged.
//!
//! # How a text is scanned
//!
//! As Gitleaks does: an Aho-Corasick automaton over every rule's keywords (ASCII case
//! ignored) finds which rules can match at all; only those rules' regexes run. A match's
//! secret (the rule's secret group, else its first capture group, else the whole match)
//! must reach the rule's entropy floor and pass none of its allowlists (regexes or stop
//! words on the secret, the match or its line). Text that contains no keyword costs one
//! automaton pass, one table lookup per byte; on a JSON answer of 3.9 KiB the whole rule
//! set takes ~2.3 µs per KiB (`BENCHMARKS.md`, `answer_parts_4KiB`). A candidate rule that
//! does not match costs one regex search (`is_match`) and no allocation.
//!
//! ```
//! use sallyport_secrets::SecretRules;
//! let rules = SecretRules::gitleaks();
//! let text = "clone with ghp_R3aLlYn0TaT0k3nBuTlOoKsLiKe1t0Kz9Ab7 please";
//! let hits = rules.find(text);
//! assert_eq!(hits.len(), 1);
//! assert_eq!(hits[0].rule, "github-pat");
//! assert_eq!(&text[hits[0].start..hits[0].end], "ghp_R3aLlYn0TaT0k3nBuTlOoKsLiKe1t0Kz9Ab7");
//! assert!(rules.find("order 2024-118734, commit 3f9a2c1d").is_empty());
//! ```
//!
//! # What is not detected
//!
//! A secret without a recognisable shape or a keyword beside it (a bare 40-character AWS
//! secret access key in a field of its own, a password), a secret split across strings, and
//! a secret in an encoding (base64, percent-encoding) that hides its prefix. The vault's own
//! secrets are found in every encoding by sallyport's scrubber instead.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use aho_corasick::automaton::Automaton;
use aho_corasick::{AhoCorasick, Anchored, MatchKind, StartKind, dfa, nfa};
use regex::{Regex, RegexBuilder, RegexSet, RegexSetBuilder};
use serde::Deserialize;

/// The vendored rule file: Gitleaks v8.30.1's default rules, in JSON.
const GITLEAKS_JSON: &str = include_str!("../rules/gitleaks-v8.30.1.json");

/// The version of the vendored rule set, for logs and audit: `gitleaks-v8.30.1`.
pub const GITLEAKS_VERSION: &str = "gitleaks-v8.30.1";

/// One credential-shaped value found in a text: its byte range and the rule that matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Hit<'r> {
    /// Where the secret starts (a byte offset on a character boundary).
    pub start: usize,
    /// Where it ends (exclusive).
    pub end: usize,
    /// The rule's id (`github-pat`, `aws-access-token`, `private-key`, `jwt`, …).
    pub rule: &'r str,
}

/// Why a rule file could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RulesError {
    /// The file is not the expected JSON.
    #[error("the rule file is not valid rule JSON")]
    Json(#[source] serde_json::Error),
    /// A rule's pattern does not compile.
    #[error("rule `{rule}` does not compile")]
    Pattern {
        /// The rule's id.
        rule: String,
        /// Why.
        #[source]
        source: regex::Error,
    },
    /// The keyword or stop-word automaton could not be built.
    #[error("the keyword automaton could not be built")]
    Keywords(#[source] aho_corasick::BuildError),
    /// An allowlist names a condition or target this crate does not know.
    #[error("rule `{rule}` has an allowlist with unknown {what} `{value}`")]
    Allowlist {
        /// The rule's id.
        rule: String,
        /// `condition` or `target`.
        what: &'static str,
        /// The value found.
        value: String,
    },
}

#[derive(Deserialize)]
struct RuleFile {
    rules: Vec<RuleSpec>,
}

#[derive(Deserialize)]
struct RuleSpec {
    id: String,
    pattern: String,
    secret_group: Option<usize>,
    #[serde(default)]
    keywords: Vec<String>,
    min_entropy: Option<f64>,
    /// A rule limited to some file paths (`*.tf`, `*.php`) has no file here: it is not used.
    path: Option<String>,
    #[serde(default)]
    allowlist: Vec<AllowSpec>,
}

#[derive(Deserialize)]
struct AllowSpec {
    condition: Option<String>,
    target: Option<String>,
    #[serde(default)]
    regexes: Vec<String>,
    #[serde(default)]
    stopwords: Vec<String>,
}

/// What an allowlist's regexes are tested against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AllowTarget {
    /// The secret (the default).
    Secret,
    /// The whole match.
    Match,
    /// The line holding the match.
    Line,
}

#[derive(Debug)]
struct Allow {
    /// Both the regexes and the stop words must say "allowed" (`and`), or either (`or`).
    all: bool,
    target: AllowTarget,
    regexes: Option<Arc<RegexSet>>,
    stopwords: Option<Arc<AhoCorasick>>,
}

impl Allow {
    fn allows(&self, secret: &str, matched: &str, line: &str) -> bool {
        let target = match self.target {
            AllowTarget::Secret => secret,
            AllowTarget::Match => matched,
            AllowTarget::Line => line,
        };
        let by_regex = self.regexes.as_ref().map(|set| set.is_match(target));
        // Gitleaks tests stop words against the secret, whatever the target.
        let by_word = self.stopwords.as_ref().map(|words| words.is_match(secret));
        match (by_regex, by_word, self.all) {
            (Some(r), Some(w), true) => r && w,
            (Some(r), Some(w), false) => r || w,
            (Some(r), None, _) => r,
            (None, Some(w), _) => w,
            (None, None, _) => false,
        }
    }
}

#[derive(Debug)]
struct Rule {
    id: Box<str>,
    regex: Regex,
    /// The capture group holding the secret; 0 for the whole match.
    group: usize,
    min_entropy: f64,
    allow: Vec<Allow>,
}

/// A compiled rule set. Build it once and share it: [`SecretRules::gitleaks`] compiles the
/// vendored rules on first use (about a tenth of a second) and hands out the same set after.
#[derive(Debug)]
pub struct SecretRules {
    rules: Vec<Rule>,
    /// Every rule's keywords, ASCII case ignored (none in an empty set).
    keywords: Option<Keywords>,
    /// For each keyword pattern, the rules it opens.
    keyword_rules: Vec<Vec<u16>>,
    /// Rules without keywords: run on every text.
    always: Vec<u16>,
}

static GITLEAKS: LazyLock<Arc<SecretRules>> = LazyLock::new(|| {
    // The vendored file is checked by this crate's tests (every rule compiles), so a failure
    // here is a build of a corrupted checkout: fall back to no rules rather than panic in a
    // caller's filter stage, and say so.
    match SecretRules::from_json(GITLEAKS_JSON) {
        Ok(rules) => Arc::new(rules),
        Err(e) => {
            tracing::error!(error = %e, "the vendored secret rules do not compile; no secret rules are used");
            Arc::new(SecretRules::empty())
        }
    }
});

impl SecretRules {
    /// Gitleaks v8.30.1's default rules (see the [crate docs](crate)), compiled once per
    /// process.
    pub fn gitleaks() -> Arc<Self> {
        Arc::clone(&GITLEAKS)
    }

    /// A rule set that finds nothing.
    pub fn empty() -> Self {
        Self {
            rules: Vec::new(),
            keywords: None,
            keyword_rules: Vec::new(),
            always: Vec::new(),
        }
    }

    /// A rule set from a rule file in the vendored file's JSON form (`{"rules": [{"id",
    /// "pattern", "secret_group", "keywords", "min_entropy", "path", "allowlist": [{"condition",
    /// "target", "regexes", "stopwords"}]}]}`). Rules limited to file paths are left out.
    ///
    /// # Errors
    ///
    /// [`RulesError`] when the JSON does not parse, a pattern does not compile, or an
    /// allowlist names an unknown condition or target.
    pub fn from_json(json: &str) -> Result<Self, RulesError> {
        let file: RuleFile = serde_json::from_str(json).map_err(RulesError::Json)?;
        // Allowlists repeat across rules (the global placeholders): one compiled set each.
        let mut sets: HashMap<Vec<String>, Arc<RegexSet>> = HashMap::new();
        let mut words: HashMap<Vec<String>, Arc<AhoCorasick>> = HashMap::new();
        let mut rules = Vec::new();
        let mut keyword_patterns: Vec<String> = Vec::new();
        let mut keyword_index: HashMap<String, usize> = HashMap::new();
        let mut keyword_rules: Vec<Vec<u16>> = Vec::new();
        let mut always = Vec::new();
        for spec in file.rules {
            if spec.path.is_some() {
                continue;
            }
            let pattern_error = |source| RulesError::Pattern {
                rule: spec.id.clone(),
                source,
            };
            let regex = RegexBuilder::new(&go_classes(&spec.pattern))
                .size_limit(64 << 20)
                .build()
                .map_err(pattern_error)?;
            let group = match spec.secret_group {
                Some(group) => group,
                None if regex.captures_len() > 1 => 1,
                None => 0,
            };
            let mut allow = Vec::new();
            for a in &spec.allowlist {
                let all = match a.condition.as_deref() {
                    None | Some("or" | "OR") => false,
                    Some("and" | "AND") => true,
                    Some(other) => {
                        return Err(RulesError::Allowlist {
                            rule: spec.id.clone(),
                            what: "condition",
                            value: other.to_owned(),
                        });
                    }
                };
                let target = match a.target.as_deref() {
                    None | Some("secret") => AllowTarget::Secret,
                    Some("match") => AllowTarget::Match,
                    Some("line") => AllowTarget::Line,
                    Some(other) => {
                        return Err(RulesError::Allowlist {
                            rule: spec.id.clone(),
                            what: "target",
                            value: other.to_owned(),
                        });
                    }
                };
                let regexes = if a.regexes.is_empty() {
                    None
                } else if let Some(set) = sets.get(&a.regexes) {
                    Some(Arc::clone(set))
                } else {
                    let set = Arc::new(
                        RegexSetBuilder::new(a.regexes.iter().map(|r| go_classes(r)))
                            .size_limit(64 << 20)
                            .build()
                            .map_err(pattern_error)?,
                    );
                    sets.insert(a.regexes.clone(), Arc::clone(&set));
                    Some(set)
                };
                let stopwords = if a.stopwords.is_empty() {
                    None
                } else if let Some(ac) = words.get(&a.stopwords) {
                    Some(Arc::clone(ac))
                } else {
                    let ac = Arc::new(
                        AhoCorasick::builder()
                            .ascii_case_insensitive(true)
                            .build(&a.stopwords)
                            .map_err(RulesError::Keywords)?,
                    );
                    words.insert(a.stopwords.clone(), Arc::clone(&ac));
                    Some(ac)
                };
                if regexes.is_some() || stopwords.is_some() {
                    allow.push(Allow {
                        all,
                        target,
                        regexes,
                        stopwords,
                    });
                }
            }
            let index = u16::try_from(rules.len()).unwrap_or(u16::MAX);
            if spec.keywords.is_empty() {
                always.push(index);
            }
            for keyword in &spec.keywords {
                let keyword = keyword.to_ascii_lowercase();
                let at = *keyword_index.entry(keyword.clone()).or_insert_with(|| {
                    keyword_patterns.push(keyword);
                    keyword_rules.push(Vec::new());
                    keyword_patterns.len() - 1
                });
                if !keyword_rules[at].contains(&index) {
                    keyword_rules[at].push(index);
                }
            }
            rules.push(Rule {
                id: spec.id.into_boxed_str(),
                regex,
                group,
                min_entropy: spec.min_entropy.unwrap_or(0.0),
                allow,
            });
        }
        let keywords = Keywords::new(&keyword_patterns)?;
        Ok(Self {
            rules,
            keywords: Some(keywords),
            keyword_rules,
            always,
        })
    }

    /// How many rules the set holds.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether the set holds no rule.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether a rule of this id is in the set.
    pub fn has_rule(&self, id: &str) -> bool {
        self.rules.iter().any(|r| &*r.id == id)
    }

    /// Every credential-shaped value in `text`, in text order, without overlaps (of two
    /// overlapping hits the earlier, or the longer at the same start, is kept).
    pub fn find<'r>(&'r self, text: &str) -> Vec<Hit<'r>> {
        let mut hits = Vec::new();
        self.find_into(text, &mut hits);
        hits
    }

    /// [`SecretRules::find`], appending to `hits` (which it sorts and de-overlaps from its
    /// first new entry on).
    pub fn find_into<'r>(&'r self, text: &str, hits: &mut Vec<Hit<'r>>) {
        let mut candidates: Vec<u16> = self.always.clone();
        if let Some(keywords) = &self.keywords {
            keywords.each(text.as_bytes(), |_, keyword| {
                candidates.extend_from_slice(&self.keyword_rules[keyword]);
            });
        }
        candidates.sort_unstable();
        candidates.dedup();
        self.run_rules(&candidates, text, hits);
    }

    /// Every credential-shaped value in each of `texts`: `found(i, hit)` for each hit in
    /// `texts[i]`, by `i` and then as [`SecretRules::find`] lists them (the same hits `find`
    /// returns for that text alone).
    ///
    /// Faster than calling `find` for each text when there are many short ones (the strings
    /// of a JSON answer): the keyword automaton makes one pass over all of them, and only
    /// texts with a keyword are searched further.
    ///
    /// ```
    /// use sallyport_secrets::SecretRules;
    /// let rules = SecretRules::gitleaks();
    /// let texts = ["queued", "clone with ghp_R3aLlYn0TaT0k3nBuTlOoKsLiKe1t0Kz9Ab7", "done"];
    /// let mut found = Vec::new();
    /// rules.find_each(&texts, |i, hit| found.push((i, hit.rule)));
    /// assert_eq!(found, [(1, "github-pat")]);
    /// ```
    pub fn find_each<'r>(&'r self, texts: &[&str], found: impl FnMut(usize, Hit<'r>)) {
        let mut joined = Vec::with_capacity(texts.iter().map(|t| t.len() + 1).sum());
        for text in texts {
            joined.extend_from_slice(text.as_bytes());
            joined.push(0);
        }
        self.find_each_joined(texts, &joined, found);
    }

    /// [`SecretRules::find_each`] for a caller that has the texts joined already: `joined`
    /// holds each of `texts`, in any ASCII case (keywords ignore it), followed by one NUL
    /// byte. The keyword pass reads `joined`; the rules read `texts`. A `joined` of another
    /// length than that is not used (the texts are joined again).
    pub fn find_each_joined<'r>(
        &'r self,
        texts: &[&str],
        joined: &[u8],
        mut found: impl FnMut(usize, Hit<'r>),
    ) {
        let Some(keywords) = &self.keywords else {
            return;
        };
        if joined.len() != texts.iter().map(|t| t.len() + 1).sum::<usize>() {
            return self.find_each(texts, found);
        }
        // (text, rule) for every rule a keyword opens in a text.
        let mut candidates: Vec<(u32, u16)> = Vec::new();
        if !self.always.is_empty() {
            for text in 0..texts.len() {
                let text = u32::try_from(text).unwrap_or(u32::MAX);
                candidates.extend(self.always.iter().map(|&r| (text, r)));
            }
        }
        // Occurrences come by their end, in order: the text holding one is found by walking
        // forward. NUL, which no keyword holds, keeps every occurrence inside one text.
        let (mut text, mut text_end) = (0usize, texts.first().map_or(0, |t| t.len() + 1));
        keywords.each(joined, |end, keyword| {
            while end > text_end && text + 1 < texts.len() {
                text += 1;
                text_end += texts[text].len() + 1;
            }
            let index = u32::try_from(text).unwrap_or(u32::MAX);
            candidates.extend(self.keyword_rules[keyword].iter().map(|&r| (index, r)));
        });
        candidates.sort_unstable();
        candidates.dedup();
        let mut hits = Vec::new();
        let mut rules = Vec::new();
        for group in candidates.chunk_by(|a, b| a.0 == b.0) {
            let i = group[0].0 as usize;
            let Some(text) = texts.get(i) else { continue };
            rules.clear();
            rules.extend(group.iter().map(|&(_, r)| r));
            hits.clear();
            self.run_rules(&rules, text, &mut hits);
            for hit in hits.drain(..) {
                found(i, hit);
            }
        }
    }

    /// Runs `candidates` (rule indexes, ascending) over `text`; appends their hits to `hits`
    /// sorted by start (the longer first, then by rule) and without overlaps.
    fn run_rules<'r>(&'r self, candidates: &[u16], text: &str, hits: &mut Vec<Hit<'r>>) {
        let first = hits.len();
        for &index in candidates {
            let rule = &self.rules[usize::from(index)];
            self.run_rule(rule, text, hits);
        }
        // A stable sort: of two hits over the same bytes, the rule listed first is kept.
        hits[first..].sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
        let mut kept = first;
        for i in first..hits.len() {
            if kept > first && hits[i].start < hits[kept - 1].end {
                continue;
            }
            hits[kept] = hits[i];
            kept += 1;
        }
        hits.truncate(kept);
    }

    fn run_rule<'r>(&'r self, rule: &'r Rule, text: &str, hits: &mut Vec<Hit<'r>>) {
        // Most candidates do not match: the cheapest search says so without the
        // allocation and the capture groups `captures_iter` starts with.
        if !rule.regex.is_match(text) {
            return;
        }
        for caps in rule.regex.captures_iter(text) {
            let Some(whole) = caps.get(0) else { continue };
            let secret = caps.get(rule.group).unwrap_or(whole);
            if secret.as_str().is_empty() {
                continue;
            }
            if rule.min_entropy > 0.0 && entropy(secret.as_str()) < rule.min_entropy {
                continue;
            }
            let line_start = text[..whole.start()].rfind('\n').map_or(0, |i| i + 1);
            let line_end = text[whole.end()..]
                .find('\n')
                .map_or(text.len(), |i| whole.end() + i);
            let line = &text[line_start..line_end];
            if rule
                .allow
                .iter()
                .any(|a| a.allows(secret.as_str(), whole.as_str(), line))
            {
                continue;
            }
            hits.push(Hit {
                start: secret.start(),
                end: secret.end(),
                rule: &rule.id,
            });
        }
    }
}

/// The keyword automaton: every keyword, ASCII case ignored, with standard (overlapping)
/// match semantics, so that every occurrence of every keyword is seen.
#[derive(Debug)]
struct Keywords {
    automaton: Automatons,
    /// The longest keyword's length: how far back a lane starts reading (see [`each_match`]).
    longest: usize,
}

#[derive(Debug)]
enum Automatons {
    /// The usual form: a DFA, one table lookup per byte.
    Dfa(dfa::DFA),
    /// For a keyword set too large for a DFA.
    Nfa(nfa::contiguous::NFA),
}

impl Keywords {
    fn new(patterns: &[String]) -> Result<Self, RulesError> {
        let longest = patterns.iter().map(String::len).max().unwrap_or(0);
        let dfa = dfa::DFA::builder()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::Standard)
            .start_kind(StartKind::Unanchored)
            .prefilter(false)
            .build(patterns);
        let automaton = match dfa {
            Ok(dfa) => Automatons::Dfa(dfa),
            Err(_) => nfa::contiguous::NFA::builder()
                .ascii_case_insensitive(true)
                .match_kind(MatchKind::Standard)
                .prefilter(false)
                .build(patterns)
                .map(Automatons::Nfa)
                .map_err(RulesError::Keywords)?,
        };
        Ok(Self { automaton, longest })
    }

    /// Calls `found(end, keyword)` for every keyword occurrence in `text` (`end` is just past
    /// its last byte), in the order of an overlapping search (by end, then as the automaton
    /// lists them).
    fn each(&self, text: &[u8], found: impl FnMut(usize, usize)) {
        match &self.automaton {
            Automatons::Dfa(dfa) => each_match(dfa, text, self.longest, found),
            Automatons::Nfa(nfa) => each_match(nfa, text, self.longest, found),
        }
    }
}

/// How many parts of a text the keyword loop reads at once.
const LANES: usize = 4;

/// Below this length a text is read in one lane.
const LANE_MIN: usize = 256;

/// The overlapping search of `aut` over `text`, as `AhoCorasick::find_overlapping_iter`
/// runs it, reporting `(end, pattern)` in the same order.
///
/// A byte costs one dependent table lookup, so one pass waits on memory at every byte. A
/// long text is cut into [`LANES`] parts read side by side instead, each part's lookups
/// independent of the others'. A lane starts `longest` bytes before its part (the longest
/// pattern's length): the automaton's state after a byte depends on the bytes since the
/// start of the longest pattern prefix that ends there, never more than `longest`, so from
/// the lane's first own byte on its states, and so its matches, are those of one pass over
/// the whole text. A lane reports only matches that end in its own part; lanes after the
/// first hold theirs until the ones before have reported.
#[inline]
fn each_match<A: Automaton>(
    aut: &A,
    text: &[u8],
    longest: usize,
    mut found: impl FnMut(usize, usize),
) {
    let Ok(start) = aut.start_state(Anchored::No) else {
        return;
    };
    if text.len() < LANE_MIN.max(longest * LANES) {
        read_lane(aut, start, text, 0, 0, &mut found);
        return;
    }
    let part = text.len().div_ceil(LANES);
    // Lane `k` owns `own[k]..end[k]` and reads from `from[k]`.
    let own: [usize; LANES] = std::array::from_fn(|k| (k * part).min(text.len()));
    let end: [usize; LANES] = std::array::from_fn(|k| ((k + 1) * part).min(text.len()));
    let from: [usize; LANES] = std::array::from_fn(|k| own[k].saturating_sub(longest));
    let steps = (0..LANES).map(|k| end[k] - from[k]).min().unwrap_or(0);
    let lanes: [&[u8]; LANES] = std::array::from_fn(|k| &text[from[k]..from[k] + steps]);
    let mut held: [Vec<(usize, usize)>; LANES] = std::array::from_fn(|_| Vec::new());
    // The four states live in registers: an array indexed in the match branch would be
    // kept in memory, and every byte would wait on a store and a load.
    let (mut s0, mut s1, mut s2, mut s3) = (start, start, start, start);
    let [l0, l1, l2, l3] = lanes;
    let bytes = l0.iter().zip(l1).zip(l2).zip(l3);
    for (step, (((&b0, &b1), &b2), &b3)) in bytes.enumerate() {
        s0 = aut.next_state(Anchored::No, s0, b0);
        s1 = aut.next_state(Anchored::No, s1, b1);
        s2 = aut.next_state(Anchored::No, s2, b2);
        s3 = aut.next_state(Anchored::No, s3, b3);
        if aut.is_special(s0) | aut.is_special(s1) | aut.is_special(s2) | aut.is_special(s3) {
            let sids = [s0, s1, s2, s3];
            lane_matches(aut, &sids, &from, &own, step, &mut held, &mut found);
        }
    }
    let sid = [s0, s1, s2, s3];
    for k in 0..LANES {
        for &(at, pattern) in &held[k] {
            found(at, pattern);
        }
        let at = from[k] + steps;
        read_lane(aut, sid[k], &text[at..end[k]], at, own[k], &mut found);
    }
}

/// The matches of the lanes' states after `step`, for [`each_match`]: the first lane's
/// reported at once, the others' held until the lanes before them have reported.
#[cold]
#[inline(never)]
fn lane_matches<A: Automaton>(
    aut: &A,
    sids: &[aho_corasick::automaton::StateID; LANES],
    from: &[usize; LANES],
    own: &[usize; LANES],
    step: usize,
    held: &mut [Vec<(usize, usize)>; LANES],
    found: &mut impl FnMut(usize, usize),
) {
    for k in 0..LANES {
        let at = from[k] + step;
        if !aut.is_match(sids[k]) || at < own[k] {
            continue;
        }
        for i in 0..aut.match_len(sids[k]) {
            let pattern = aut.match_pattern(sids[k], i).as_usize();
            if k == 0 {
                found(at + 1, pattern);
            } else {
                held[k].push((at + 1, pattern));
            }
        }
    }
}

/// One lane of [`each_match`]: reads `bytes` (which start at `offset` in the text) from
/// state `sid`, reporting matches that end at or after `own`.
#[inline]
fn read_lane<A: Automaton>(
    aut: &A,
    mut sid: aho_corasick::automaton::StateID,
    bytes: &[u8],
    offset: usize,
    own: usize,
    found: &mut impl FnMut(usize, usize),
) {
    for (i, &byte) in bytes.iter().enumerate() {
        sid = aut.next_state(Anchored::No, sid, byte);
        if aut.is_special(sid) && aut.is_match(sid) && offset + i >= own {
            for j in 0..aut.match_len(sid) {
                found(offset + i + 1, aut.match_pattern(sid, j).as_usize());
            }
        }
    }
}

/// `pattern` with its Perl classes (`\w`, `\d`, `\s` and their negations) made ASCII-only,
/// as they are in Go's RE2, for which Gitleaks writes its rules. Rust's `regex` makes them
/// Unicode-aware, which changes what a rule matches and multiplies the size of every
/// counted repetition of them (`[\w-]{36}`).
fn go_classes(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars().peekable();
    let mut in_class = false;
    // Right after `[` or `[^`, a `]` is a literal member.
    let mut class_start = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let Some(next) = chars.next() else {
                    out.push(c);
                    break;
                };
                let posix = match next {
                    'w' => Some("[:word:]"),
                    'd' => Some("[:digit:]"),
                    's' => Some("[:space:]"),
                    'W' => Some("[:^word:]"),
                    'D' => Some("[:^digit:]"),
                    'S' => Some("[:^space:]"),
                    _ => None,
                };
                match posix {
                    Some(class) if in_class => out.push_str(class),
                    Some(class) => {
                        out.push('[');
                        out.push_str(class);
                        out.push(']');
                    }
                    None => {
                        out.push(c);
                        out.push(next);
                    }
                }
                class_start = false;
            }
            '[' if !in_class => {
                in_class = true;
                class_start = true;
                out.push(c);
                if chars.peek() == Some(&'^') {
                    out.push('^');
                    chars.next();
                }
            }
            '[' if chars.peek() == Some(&':') => {
                // A POSIX class inside a class: copied whole.
                out.push(c);
                for p in chars.by_ref() {
                    out.push(p);
                    if p == ']' {
                        break;
                    }
                }
                class_start = false;
            }
            ']' if in_class && !class_start => {
                in_class = false;
                out.push(c);
            }
            _ => {
                out.push(c);
                class_start = false;
            }
        }
    }
    out
}

/// Shannon entropy of `text` in bits per byte, as Gitleaks computes it.
fn entropy(text: &str) -> f64 {
    let mut counts = [0u32; 256];
    for b in text.bytes() {
        counts[usize::from(b)] += 1;
    }
    #[allow(clippy::cast_precision_loss, reason = "a text's length fits an f64")]
    let len = text.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / len;
            -p * p.log2()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::Strategy;

    static KEYWORDS: LazyLock<Vec<String>> = LazyLock::new(keyword_list);

    /// The keywords' automaton as `aho-corasick` builds it by default: the reference.
    static REFERENCE: LazyLock<AhoCorasick> = LazyLock::new(|| {
        AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::Standard)
            .build(keyword_list())
            .expect("the keywords build")
    });

    #[test]
    fn every_vendored_rule_compiles_and_the_common_providers_are_in_the_set() {
        let rules = SecretRules::from_json(GITLEAKS_JSON).expect("the vendored rules compile");
        // 221 rules, of which 4 are limited to file paths.
        assert_eq!(rules.len(), 217);
        for id in [
            "github-pat",
            "gitlab-pat",
            "slack-webhook-url",
            "aws-access-token",
            "stripe-access-token",
            "gcp-api-key",
            "openai-api-key",
            "private-key",
            "jwt",
            "generic-api-key",
        ] {
            assert!(rules.has_rule(id), "{id}");
        }
    }

    /// Every keyword occurrence the keyword loop reports, and what the automaton's own
    /// overlapping search reports, for the vendored keywords.
    fn keyword_matches(text: &str) -> (Vec<usize>, Vec<usize>) {
        let rules = SecretRules::gitleaks();
        let mut fast = Vec::new();
        if let Some(keywords) = &rules.keywords {
            keywords.each(text.as_bytes(), |_, k| fast.push(k));
        }
        let reference = REFERENCE
            .find_overlapping_iter(text)
            .map(|m| m.pattern().as_usize())
            .collect();
        (fast, reference)
    }

    /// The vendored rules' keywords, lowercased and deduplicated in the order the rule set
    /// numbers them.
    fn keyword_list() -> Vec<String> {
        let file: RuleFile = serde_json::from_str(GITLEAKS_JSON).expect("the vendored rules parse");
        let mut list: Vec<String> = Vec::new();
        for rule in file.rules.iter().filter(|r| r.path.is_none()) {
            for keyword in &rule.keywords {
                let keyword = keyword.to_ascii_lowercase();
                if !list.contains(&keyword) {
                    list.push(keyword);
                }
            }
        }
        list
    }

    #[test]
    fn the_keyword_loop_reports_what_the_overlapping_search_reports() {
        let keywords = keyword_list();
        assert_eq!(keywords.len(), 242);
        let mut text = String::new();
        for (i, keyword) in keywords.iter().enumerate() {
            // Each keyword in two cases, overlapping the next one and apart from it.
            text.push_str(keyword);
            text.push_str(&keyword.to_ascii_uppercase()[..keyword.len() / 2]);
            text.push_str(if i % 2 == 0 { " " } else { "é" });
        }
        let (fast, reference) = keyword_matches(&text);
        assert!(fast.len() >= keywords.len(), "{}", fast.len());
        assert_eq!(fast, reference);
        let (fast, reference) =
            keyword_matches("https://api.example.com/v1/deployments/dep_000001 key=sk-ey");
        assert_eq!(fast, reference);
        let found: Vec<&str> = fast.iter().map(|&k| keywords[k].as_str()).collect();
        assert_eq!(found, ["api", "key", "ey", "sk", "ey"]);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// On texts made of keywords (whole or cut, any case), credential-shaped values and
        /// filler, the keyword loop reports the same occurrences in the same order as the
        /// automaton's own search.
        #[test]
        fn the_keyword_loop_matches_the_automaton_on_any_text(
            pieces in proptest::collection::vec(piece(), 0..12)
        ) {
            let text = pieces.concat();
            let (fast, reference) = keyword_matches(&text);
            proptest::prop_assert_eq!(fast, reference, "{:?}", text);
        }
    }

    /// Pieces of text for the differential tests: a keyword (whole or cut, any case), a
    /// credential-shaped value, or filler.
    fn piece() -> impl Strategy<Value = String> {
        proptest::prop_oneof![
            (0..242usize, proptest::prelude::any::<u64>(), 0usize..24).prop_map(|(i, flips, cut)| {
                let keyword = &KEYWORDS[i];
                let cut = cut.min(keyword.len()).max(1);
                keyword[..cut]
                    .chars()
                    .enumerate()
                    .map(|(j, c)| if flips >> (j % 64) & 1 == 1 { c.to_ascii_uppercase() } else { c })
                    .collect::<String>()
            }),
            proptest::sample::select(vec![
                "ghp_R3aLlYn0TaT0k3nBuTlOoKsLiKe1t0Kz9Ab7",
                "AKIAZ7QK3TVMWX5L2RHN",
                "api_key = \"Zq8vT2mK9pLx4Rw7Yb3N\"",
                "token: 9fK2mQ7xL4pW8vR3tZ6yB1nC5hJ0sD",
                "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
                "xoxb-1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
                "\n",
                "\"",
                "client_secret: 'Zq8vT2mK9pLx4Rw7Yb3NqA'",
                "password=Zq8vT2mK9pLx4Rw7Yb3N;",
                "heroku_api_key = \"2f6b1a3c-9d4e-4f5a-8b7c-1d2e3f4a5b6c\"",
                "SLACK_TOKEN=xoxp-123456789012-123456789012-abcdefabcdefabcdefabcdefabcdefab",
            ])
            .prop_map(str::to_owned),
            "[a-zA-Z0-9 ._~=:/\"-é]{0,12}",
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(600))]
        /// On long texts, read in lanes, the keyword loop still reports what one pass of the
        /// automaton reports, in the same order.
        #[test]
        fn the_keyword_lanes_match_the_automaton_on_long_texts(
            pieces in proptest::collection::vec(piece(), 20..160)
        ) {
            let text = pieces.concat();
            let (fast, reference) = keyword_matches(&text);
            proptest::prop_assert_eq!(fast, reference, "{:?}", text);
        }

        /// `find_each` over many texts finds, for each, what `find` finds in it alone.
        #[test]
        fn find_each_finds_what_find_finds_in_each_text(
            texts in proptest::collection::vec(
                proptest::collection::vec(piece(), 0..8).prop_map(|p| p.concat()),
                0..40,
            )
        ) {
            let rules = SecretRules::gitleaks();
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let mut each: Vec<(usize, Hit<'_>)> = Vec::new();
            rules.find_each(&refs, |i, hit| each.push((i, hit)));
            let one_by_one: Vec<(usize, Hit<'_>)> = refs
                .iter()
                .enumerate()
                .flat_map(|(i, t)| rules.find(t).into_iter().map(move |h| (i, h)))
                .collect();
            proptest::prop_assert_eq!(&each, &one_by_one);
            // Joined by the caller, in another case: the same hits.
            let mut joined = Vec::new();
            for text in &refs {
                joined.extend(text.bytes().map(|b| b.to_ascii_uppercase()));
                joined.push(0);
            }
            let mut from_joined: Vec<(usize, Hit<'_>)> = Vec::new();
            rules.find_each_joined(&refs, &joined, |i, hit| from_joined.push((i, hit)));
            proptest::prop_assert_eq!(&from_joined, &one_by_one);
            // A `joined` that does not fit the texts is not used.
            let mut wrong: Vec<(usize, Hit<'_>)> = Vec::new();
            rules.find_each_joined(&refs, b"ghp_", |i, hit| wrong.push((i, hit)));
            proptest::prop_assert_eq!(&wrong, &one_by_one);
        }
    }

    #[test]
    fn a_keyword_is_found_wherever_the_lanes_are_cut() {
        // Every position of a keyword across a 1 KiB text, so that some occurrence straddles
        // each boundary between lanes.
        for keyword in ["bundle_enterprise__contribsys__com", "ghp_", "ey", "api"] {
            for at in 0..(1024 - keyword.len()) {
                let mut text = "-".repeat(1024);
                text.replace_range(at..at + keyword.len(), keyword);
                let (fast, reference) = keyword_matches(&text);
                assert!(!reference.is_empty());
                assert_eq!(fast, reference, "{keyword} at {at}");
            }
        }
    }

    #[test]
    fn find_each_reports_each_hit_with_its_text() {
        let rules = SecretRules::gitleaks();
        let texts = [
            "nothing here",
            "AKIAZ7QK3TVMWX5L2RHN",
            "",
            "see ghp_R3aLlYn0TaT0k3nBuTlOoKsLiKe1t0Kz9Ab7 and AKIAZ7QK3TVMWX5L2RHN",
        ];
        let mut found = Vec::new();
        rules.find_each(&texts, |i, hit| {
            found.push((i, hit.rule, hit.start, hit.end));
        });
        assert_eq!(
            found,
            [
                (1, "aws-access-token", 0, 20),
                (3, "github-pat", 4, 44),
                (3, "aws-access-token", 49, 69),
            ]
        );
    }

    #[test]
    fn perl_classes_become_ascii_as_in_go() {
        assert_eq!(
            go_classes(r"\b[\w.-]{3}\d\s"),
            r"\b[[:word:].-]{3}[[:digit:]][[:space:]]"
        );
        assert_eq!(
            go_classes(r"[^\S\n]\\w[]\w]"),
            r"[^[:^space:]\n]\\w[][:word:]]"
        );
        assert_eq!(go_classes(r"[[:alpha:]\w]"), r"[[:alpha:][:word:]]");
        let rules = SecretRules::gitleaks();
        // `\w` no longer matches a letter outside ASCII.
        assert!(
            rules
                .find("ghp_R3aLlYn0TaT0k3nBuTlOoKsLiKe1t0Kz9A\u{e9}7")
                .is_empty()
        );
    }

    #[test]
    fn entropy_matches_the_textbook_values() {
        assert!((entropy("aaaa") - 0.0).abs() < 1e-9);
        assert!((entropy("abab") - 1.0).abs() < 1e-9);
        assert!((entropy("abcd") - 2.0).abs() < 1e-9);
    }

    #[test]
    fn an_allowlisted_placeholder_is_not_a_hit_and_hits_do_not_overlap() {
        let rules = SecretRules::gitleaks();
        assert!(rules.find("api_key = \"${API_KEY}\"").is_empty());
        let text = "token: ghp_R3aLlYn0TaT0k3nBuTlOoKsLiKe1t0Kz9Ab7 and AKIAZ7QK3TVMWX5L2RHN";
        let hits = rules.find(text);
        let found: Vec<(&str, &str)> = hits
            .iter()
            .map(|h| (h.rule, &text[h.start..h.end]))
            .collect();
        assert_eq!(
            found,
            [
                ("github-pat", "ghp_R3aLlYn0TaT0k3nBuTlOoKsLiKe1t0Kz9Ab7"),
                ("aws-access-token", "AKIAZ7QK3TVMWX5L2RHN")
            ]
        );
    }
}
