//! Capped capture of one output stream.

use std::collections::VecDeque;

/// Bytes of stderr kept for the tail shown in a rejection's reason.
const TAIL: usize = 1024;

/// Keeps the first `cap` bytes of a stream and (optionally) its last [`TAIL`] bytes; counts
/// the rest and discards it, so memory stays bounded however much the command writes.
#[derive(Debug)]
pub(crate) struct Capture {
    cap: usize,
    head: Vec<u8>,
    tail: Option<VecDeque<u8>>,
    total: u64,
}

impl Capture {
    pub(crate) fn new(cap: usize, keep_tail: bool) -> Self {
        Self {
            cap,
            head: Vec::with_capacity(cap.min(8 * 1024)),
            tail: keep_tail.then(|| VecDeque::with_capacity(TAIL)),
            total: 0,
        }
    }

    pub(crate) fn push(&mut self, data: &[u8]) {
        self.total = self.total.saturating_add(data.len() as u64);
        let room = self.cap.saturating_sub(self.head.len());
        self.head.extend_from_slice(&data[..room.min(data.len())]);
        if let Some(tail) = &mut self.tail {
            let keep = &data[data.len().saturating_sub(TAIL)..];
            let overflow = (tail.len() + keep.len()).saturating_sub(TAIL);
            tail.drain(..overflow.min(tail.len()));
            tail.extend(keep);
        }
    }

    /// Bytes the stream carried in total.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Whether bytes were discarded.
    pub(crate) fn truncated(&self) -> bool {
        self.total > self.head.len() as u64
    }

    /// The kept head, as text (invalid UTF-8 replaced).
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.head).into_owned()
    }

    /// The last few lines of the stream, one line of printable text, at most `max` chars.
    pub(crate) fn tail_line(&self, max: usize) -> String {
        let Some(tail) = &self.tail else {
            return String::new();
        };
        let bytes: Vec<u8> = tail.iter().copied().collect();
        let text = String::from_utf8_lossy(&bytes);
        let cleaned: String = text
            .split(['\n', '\r'])
            .map(|line| {
                line.chars()
                    .map(|c| if c.is_control() { ' ' } else { c })
                    .collect::<String>()
                    .trim()
                    .to_owned()
            })
            .filter(|line| !line.is_empty())
            .collect::<Vec<_>>()
            .join(" | ");
        let count = cleaned.chars().count();
        if count <= max {
            return cleaned;
        }
        let skipped: String = cleaned.chars().skip(count - max).collect();
        format!("…{skipped}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_stops_at_the_cap_and_the_total_keeps_counting() {
        let mut c = Capture::new(4, false);
        c.push(b"abc");
        c.push(b"defgh");
        assert_eq!(c.text(), "abcd");
        assert_eq!(c.total(), 8);
        assert!(c.truncated());
    }

    #[test]
    fn the_tail_keeps_the_last_lines_as_one_printable_line() {
        let mut c = Capture::new(0, true);
        c.push(&vec![b'x'; 5000]);
        c.push(b"\nerror: unit \x1b[1mnginx\x1b[0m not found\n");
        assert_eq!(c.tail_line(30), "…: unit  [1mnginx [0m not found");
        assert_eq!(c.total(), 5000 + 37);
    }
}
