//! Capped capture of one output stream.

use std::collections::VecDeque;

use sallyport_core::scrub::Scrubber;

/// Bytes of stderr kept for the tail shown in a rejection's reason.
const TAIL: usize = 1024;

/// Keeps the first `cap` bytes of a stream and (optionally) its last [`TAIL`] bytes; counts
/// the rest and discards it, so memory stays bounded however much the command writes.
///
/// The texts it gives out are scrubbed with the call's scrubber before any cut, and a
/// fragment of a secret left at a cut (the cap, the start of the tail) is redacted.
#[derive(Debug)]
pub(crate) struct Capture<'s> {
    cap: usize,
    head: Vec<u8>,
    tail: Option<VecDeque<u8>>,
    total: u64,
    scrubber: &'s Scrubber,
}

impl<'s> Capture<'s> {
    pub(crate) fn new(cap: usize, keep_tail: bool, scrubber: &'s Scrubber) -> Self {
        Self {
            cap,
            head: Vec::with_capacity(cap.min(8 * 1024)),
            tail: keep_tail.then(|| VecDeque::with_capacity(TAIL)),
            total: 0,
            scrubber,
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

    /// The kept head, as text (invalid UTF-8 replaced), scrubbed; when the stream was cut at
    /// the cap, a character split by the cap is dropped and a secret fragment before the cut
    /// is redacted.
    pub(crate) fn text(&self) -> String {
        if !self.truncated() {
            return self
                .scrubber
                .scrub(&String::from_utf8_lossy(&self.head))
                .into_owned();
        }
        let head = match std::str::from_utf8(&self.head) {
            Err(e) if e.error_len().is_none() => &self.head[..e.valid_up_to()],
            _ => &self.head[..],
        };
        self.scrubber.scrub_head(&String::from_utf8_lossy(head))
    }

    /// The last few lines of the stream, one line of printable text, at most `max` chars.
    pub(crate) fn tail_line(&self, max: usize) -> String {
        let Some(tail) = &self.tail else {
            return String::new();
        };
        let bytes: Vec<u8> = tail.iter().copied().collect();
        // Scrubbed before anything is cut; the tail itself starts at a cut when the stream
        // was longer than it (a split character there is dropped, not replaced).
        let text = if self.total > bytes.len() as u64 {
            let start = bytes
                .iter()
                .position(|b| !(0x80..0xC0).contains(b))
                .unwrap_or(bytes.len());
            self.scrubber
                .scrub_tail(&String::from_utf8_lossy(&bytes[start..]))
        } else {
            self.scrubber
                .scrub(&String::from_utf8_lossy(&bytes))
                .into_owned()
        };
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
        let start = cleaned
            .char_indices()
            .nth(count - max)
            .map_or(cleaned.len(), |(i, _)| i);
        self.scrubber.bounded_tail(&cleaned, cleaned.len() - start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_stops_at_the_cap_and_the_total_keeps_counting() {
        let none = Scrubber::empty();
        let mut c = Capture::new(4, false, &none);
        c.push(b"abc");
        c.push(b"defgh");
        assert_eq!(c.text(), "abcd");
        assert_eq!(c.total(), 8);
        assert!(c.truncated());
    }

    #[test]
    fn the_tail_keeps_the_last_lines_as_one_printable_line() {
        let none = Scrubber::empty();
        let mut c = Capture::new(0, true, &none);
        c.push(&vec![b'x'; 5000]);
        c.push(b"\nerror: unit \x1b[1mnginx\x1b[0m not found\n");
        assert_eq!(c.tail_line(30), "…: unit  [1mnginx [0m not found");
        assert_eq!(c.total(), 5000 + 37);
    }

    const SECRET: &str = "sk-live/Ab+12=x.y_z~Q";

    #[test]
    fn a_secret_cut_by_the_cap_leaves_no_fragment_in_the_head() {
        let scrubber = Scrubber::new([SECRET]);
        let mut c = Capture::new(20, false, &scrubber);
        c.push(format!("token: {SECRET} and more").as_bytes());
        // The cap keeps `token: sk-live/Ab+1`: 12 bytes of the secret, redacted.
        assert_eq!(c.text(), "token: [REDACTED]");
        assert!(c.truncated());
        let mut whole = Capture::new(100, false, &scrubber);
        whole.push(format!("token: {SECRET}").as_bytes());
        assert_eq!(whole.text(), "token: [REDACTED]");
    }

    #[test]
    fn a_secret_cut_by_the_tail_or_its_line_limit_leaves_no_fragment() {
        let scrubber = Scrubber::new([SECRET]);
        // The tail's start falls 9 bytes into the secret: its last 12 bytes open the tail.
        let mut c = Capture::new(0, true, &scrubber);
        c.push(&vec![b'x'; 5000]);
        c.push(SECRET.as_bytes());
        let after = " denied ";
        c.push(after.as_bytes());
        c.push(&vec![b'y'; TAIL - (SECRET.len() - 9) - after.len()]);
        let tail = c.tail_line(2000);
        assert!(tail.starts_with("[REDACTED] denied y"), "{tail}");
        assert!(!tail.contains("b+12=x"), "{tail}");
        // The line limit cuts inside the echoed secret: the whole secret is redacted first.
        let mut c = Capture::new(0, true, &scrubber);
        c.push(format!("error: {SECRET} denied").as_bytes());
        assert_eq!(c.tail_line(12), "… denied");
        assert_eq!(c.tail_line(17), "…[REDACTED] denied");
    }
}
