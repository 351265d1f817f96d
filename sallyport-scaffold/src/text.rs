//! Names and text: Rust identifiers from JSON names and operation ids, and doc comments from
//! an API's Markdown.

/// Rust's keywords (strict and reserved, 2024 edition): a field of that name gets a trailing `_`.
const KEYWORDS: &[&str] = &[
    "abstract", "as", "async", "await", "become", "box", "break", "const", "continue", "crate",
    "do", "dyn", "else", "enum", "extern", "false", "final", "fn", "for", "gen", "if", "impl",
    "in", "let", "loop", "macro", "match", "mod", "move", "mut", "override", "priv", "pub", "ref",
    "return", "self", "static", "struct", "super", "trait", "true", "try", "type", "typeof",
    "unsafe", "unsized", "use", "virtual", "where", "while", "yield",
];

/// The words of a name: split at every character that is not a letter or digit and before
/// each upper-case letter that follows a lower-case one or a digit (`createRelease` →
/// `create`, `release`).
fn words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut previous_lower = false;
    for c in name.chars() {
        if !c.is_ascii_alphanumeric() {
            if !current.is_empty() {
                words.push(std::mem::take(&mut current));
            }
            previous_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && previous_lower && !current.is_empty() {
            words.push(std::mem::take(&mut current));
        }
        previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        current.push(c.to_ascii_lowercase());
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

/// `snake_case`, starting with a letter (`x` is put in front otherwise).
pub(crate) fn snake(name: &str) -> String {
    let mut out = words(name).join("_");
    if !out.starts_with(|c: char| c.is_ascii_lowercase()) {
        out.insert_str(0, "x_");
    }
    out
}

/// The action name for an operation id: snake case, at most 64 characters.
pub(crate) fn action_name(operation_id: &str) -> String {
    let mut name = snake(operation_id);
    if name.len() > 64 {
        name.truncate(64);
        while name.ends_with('_') {
            name.pop();
        }
    }
    name
}

/// `PascalCase`, starting with a letter (`V` is put in front otherwise).
pub(crate) fn pascal(name: &str) -> String {
    let mut out = String::new();
    for word in words(name) {
        let mut chars = word.chars();
        if let Some(first) = chars.next() {
            out.push(first.to_ascii_uppercase());
            out.extend(chars);
        }
    }
    if !out.starts_with(|c: char| c.is_ascii_uppercase()) {
        out.insert(0, 'V');
    }
    out
}

/// A field identifier for a JSON name (snake case; a keyword gets a trailing `_`).
pub(crate) fn field_ident(json_name: &str) -> String {
    let mut ident = snake(json_name);
    if KEYWORDS.contains(&ident.as_str()) {
        ident.push('_');
    }
    ident
}

/// A Rust string literal for `text`.
pub(crate) fn literal(text: &str) -> String {
    format!("{text:?}")
}

/// Whether `name` can be written as a bare identifier in an attribute (`query(page)`).
pub(crate) fn is_plain_ident(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !KEYWORDS.contains(&name)
}

/// Markdown from the document made plain for a doc comment: links become their text, HTML
/// tags are dropped, square and angle brackets that rustdoc would read as links or tags are
/// escaped, and blank-line paragraphs are kept. At most `max_paragraphs` paragraphs.
pub(crate) fn plain(markdown: &str, max_paragraphs: usize) -> Vec<String> {
    let mut paragraphs = Vec::new();
    for paragraph in markdown.split("\n\n") {
        let text = paragraph
            .lines()
            .map(|l| l.trim().trim_start_matches('>').trim())
            .map(|l| {
                [
                    "[!NOTE]",
                    "[!WARNING]",
                    "[!IMPORTANT]",
                    "[!TIP]",
                    "[!CAUTION]",
                ]
                .iter()
                .fold(l.to_owned(), |l, marker| l.replace(marker, "Note:"))
            })
            .filter(|l| !l.is_empty())
            .collect::<Vec<String>>()
            .join(" ");
        let text = unlink(&text);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        paragraphs.push(escape_doc(text));
        if paragraphs.len() == max_paragraphs {
            break;
        }
    }
    paragraphs
}

/// `[text](url)` → `text`; `<tag …>` dropped.
fn unlink(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c == '['
            && let Some(close) = rest.find("](")
            && let Some(end) = rest[close..].find(')')
            && !rest[1..close].contains('[')
        {
            out.push_str(&rest[1..close]);
            rest = &rest[close + end + 1..];
            continue;
        }
        if c == '<'
            && let Some(end) = rest.find('>')
            && rest[1..end]
                .chars()
                .next()
                .is_some_and(|n| n.is_ascii_alphabetic() || n == '/')
            && !rest[1..end].contains(['<', '\n'])
        {
            rest = &rest[end + 1..];
            continue;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// Escapes what rustdoc would read as a link or an HTML tag, and writes bare URLs as
/// `<https://…>` autolinks.
fn escape_doc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, word) in text.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let trimmed = word.trim_end_matches(['.', ',', ';', ':', ')']);
        if (trimmed.starts_with("https://") || trimmed.starts_with("http://"))
            && !trimmed.contains(['<', '>', '[', ']', '`'])
        {
            out.push('<');
            out.push_str(trimmed);
            out.push('>');
            out.push_str(&word[trimmed.len()..]);
            continue;
        }
        for c in word.chars() {
            match c {
                '[' | ']' | '<' | '>' => {
                    out.push('\\');
                    out.push(c);
                }
                c if c.is_control() => {}
                c => out.push(c),
            }
        }
    }
    out
}

/// Lines of at most about `width` characters (words are never split).
pub(crate) fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_ids_become_snake_and_pascal_names() {
        assert_eq!(action_name("issues/create"), "issues_create");
        assert_eq!(action_name("repos/create-release"), "repos_create_release");
        assert_eq!(action_name("createPet"), "create_pet");
        assert_eq!(pascal("repos/create-release"), "ReposCreateRelease");
        assert_eq!(pascal("listPets"), "ListPets");
        assert_eq!(pascal("+1"), "V1");
        assert_eq!(field_ident("type"), "type_");
        assert_eq!(field_ident("per-page"), "per_page");
        assert_eq!(snake("2fa"), "x_2fa");
    }

    #[test]
    fn markdown_links_and_tags_become_plain_doc_text() {
        let text = "See [Create an issue](https://docs.example/x) <br/>for more.\n\nSecond [x] a < b.\n\nThird.";
        assert_eq!(
            plain(text, 2),
            ["See Create an issue for more.", "Second \\[x\\] a \\< b."]
        );
        assert_eq!(
            plain("Go to https://example.com/a.", 1),
            ["Go to <https://example.com/a>."]
        );
    }
}
