//! JSON pointers (RFC 6901), built and taken apart in one place: the answer guards, the
//! personal-data masks, payload pruning and definition drift all name a place in a JSON value
//! this way, and they must agree on the escaping (`~` ↔ `~0`, `/` ↔ `~1`).
//!
//! A leaf module: it imports nothing from the crate, so any module may use it.

/// Appends `/i` to a JSON pointer.
pub(crate) fn push_index(pointer: &mut String, i: usize) {
    pointer.push('/');
    pointer.push_str(itoa::Buffer::new().format(i));
}

/// Appends `key` to a JSON pointer, escaped (`~` → `~0`, `/` → `~1`), without a leading `/`.
pub(crate) fn push_escaped(pointer: &mut String, key: &str) {
    for c in key.chars() {
        match c {
            '~' => pointer.push_str("~0"),
            '/' => pointer.push_str("~1"),
            c => pointer.push(c),
        }
    }
}

/// Appends `/key`, escaped, to a JSON pointer.
pub(crate) fn push_key(pointer: &mut String, key: &str) {
    pointer.push('/');
    push_escaped(pointer, key);
}

/// `pointer` with `/key`, escaped, appended: a new pointer to a child of the value it names.
pub(crate) fn child(pointer: &str, key: &str) -> String {
    let mut out = String::with_capacity(pointer.len() + key.len() + 1);
    out.push_str(pointer);
    push_key(&mut out, key);
    out
}

/// One segment of a JSON pointer, unescaped (`~1` → `/`, then `~0` → `~`).
pub(crate) fn unescape(segment: &str) -> String {
    segment.replace("~1", "/").replace("~0", "~")
}

/// The segments of a JSON pointer, unescaped; the empty pointer (the whole value) has none.
pub(crate) fn segments(pointer: &str) -> Vec<String> {
    if pointer.is_empty() {
        return Vec::new();
    }
    pointer
        .trim_start_matches('/')
        .split('/')
        .map(unescape)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_round_trips_through_escaping() {
        for key in ["plain", "a/b", "~", "~1", "x~0/y", ""] {
            let mut p = String::new();
            push_key(&mut p, key);
            assert_eq!(segments(&p), vec![key.to_owned()], "key {key:?} as {p:?}");
        }
    }

    #[test]
    fn indexes_and_keys_compose() {
        let mut p = String::new();
        push_key(&mut p, "items");
        push_index(&mut p, 12);
        push_key(&mut p, "a/b~c");
        assert_eq!(p, "/items/12/a~1b~0c");
        assert_eq!(segments(&p), ["items", "12", "a/b~c"]);
        assert!(segments("").is_empty());
        assert_eq!(child("/a", "b/c"), "/a/b~1c");
    }
}
