//! Where whole RESP values begin and end in a byte stream read in chunks
//! of any size, for the proxy: it tells which reply answers which command
//! by counting both (a connection answers its commands in order).
//!
//! RESP2 and RESP3 alike; a RESP3 push (`>`) or attribute (`|`) is not an
//! answer to a command and gets no number, nor does a command of the
//! subscribe family (in RESP3 it is answered by pushes only). Inline
//! commands (a bare line) count as one value each.

/// One top-level value's part in one chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    /// Its number among the counted values of the stream (from 0); `None`
    /// for a value that is not counted.
    pub(crate) index: Option<u64>,
    /// Where it starts in the chunk (0 when it started in an earlier one).
    pub(crate) start: usize,
    /// Where it ends in the chunk (exclusive); `None` when it goes on in
    /// the next one.
    pub(crate) end: Option<usize>,
}

impl Span {
    /// Whether the byte at `at` of the chunk belongs to this value.
    pub(crate) fn holds(&self, at: usize) -> bool {
        self.start <= at && self.end.is_none_or(|end| at < end)
    }
}

/// What a value's header line announced to come.
#[derive(Debug)]
enum Expect {
    /// The first byte of a value.
    Type,
    /// The rest of a line, after its type byte.
    Line { kind: u8 },
    /// This many more bytes of a bulk string, its `\r\n` included.
    Bulk { left: usize },
}

/// Which values count: the direction decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counting {
    /// Commands that get an answer (not the subscribe family).
    Commands,
    /// Replies (not pushes or attributes).
    Replies,
}

/// The framing state of one direction of one connection.
#[derive(Debug)]
pub(crate) struct Framer {
    counting: Counting,
    expect: Expect,
    /// The elements still to come of each open aggregate, outermost first.
    open: Vec<u64>,
    line: Vec<u8>,
    /// The value now read: its number, if it counts.
    current: Option<u64>,
    /// The first bulk string of the command now read (its name), while it
    /// is read.
    head: Vec<u8>,
    reading_head: bool,
    counted: u64,
    /// Whether values that begin now get numbers.
    numbering: bool,
}

/// How much of a command's name (with its `\r\n`) is kept to tell the
/// subscribe family.
const HEAD: usize = 16;

impl Framer {
    pub(crate) fn new(counting: Counting) -> Self {
        Framer {
            counting,
            expect: Expect::Type,
            open: Vec::new(),
            line: Vec::new(),
            current: None,
            head: Vec::new(),
            reading_head: false,
            counted: 0,
            numbering: true,
        }
    }

    /// As [`Framer::feed`], for a chunk thrown away on its way: the values
    /// that begin in it get no number (no answer comes to a command that
    /// never arrived).
    pub(crate) fn feed_lost(&mut self, chunk: &[u8]) -> Vec<Span> {
        self.numbering = false;
        let spans = self.feed(chunk);
        self.numbering = true;
        spans
    }

    /// The values `chunk` holds part of, in order.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Vec<Span> {
        let mut spans = Vec::new();
        // Where the value now read starts in this chunk, if it does.
        let mut start = match (&self.expect, self.open.is_empty()) {
            (Expect::Type, true) => None,
            _ => Some(0),
        };
        let mut at = 0;
        while at < chunk.len() {
            let byte = chunk[at];
            let done = match &mut self.expect {
                Expect::Type => {
                    if self.open.is_empty() {
                        start = Some(at);
                        self.begin(byte);
                    }
                    self.expect = Expect::Line { kind: byte };
                    self.line.clear();
                    at += 1;
                    false
                }
                Expect::Line { kind } => {
                    let kind = *kind;
                    at += 1;
                    if byte == b'\n' && self.line.last() == Some(&b'\r') {
                        self.line.pop();
                        self.after_line(kind)
                    } else {
                        self.line.push(byte);
                        false
                    }
                }
                Expect::Bulk { left } => {
                    let take = (*left).min(chunk.len() - at);
                    if self.reading_head {
                        let data = &chunk[at..at + take];
                        let room = HEAD.saturating_sub(self.head.len());
                        self.head.extend_from_slice(&data[..data.len().min(room)]);
                    }
                    *left -= take;
                    at += take;
                    let finished = *left == 0;
                    if finished && self.reading_head {
                        self.reading_head = false;
                        self.name_read();
                    }
                    finished && self.element_done()
                }
            };
            if done {
                spans.push(Span {
                    index: self.current,
                    start: start.take().unwrap_or(0),
                    end: Some(at),
                });
            }
        }
        if let Some(start) = start {
            spans.push(Span {
                index: self.current,
                start,
                end: None,
            });
        }
        spans
    }

    /// A top-level value begins with `kind`.
    fn begin(&mut self, kind: u8) {
        self.head.clear();
        self.reading_head = false;
        self.current = match (self.counting, kind) {
            _ if !self.numbering => None,
            (Counting::Replies, b'>' | b'|') => None,
            // A command's number waits for its name (see `name_read`).
            (Counting::Commands, b'*') => {
                self.reading_head = true;
                None
            }
            _ => Some(self.next_number()),
        };
    }

    fn next_number(&mut self) -> u64 {
        self.counted += 1;
        self.counted - 1
    }

    /// The command's name is read: it counts unless it subscribes or
    /// unsubscribes.
    fn name_read(&mut self) {
        let name = self.head.to_ascii_lowercase();
        let name = name.strip_suffix(b"\r\n").unwrap_or(&name);
        let subscribes = matches!(
            name,
            b"subscribe"
                | b"unsubscribe"
                | b"psubscribe"
                | b"punsubscribe"
                | b"ssubscribe"
                | b"sunsubscribe"
        );
        if !subscribes {
            self.current = Some(self.next_number());
        }
    }

    /// A header or simple line of `kind` is read; whether a top-level
    /// value ended with it.
    fn after_line(&mut self, kind: u8) -> bool {
        let length = || {
            std::str::from_utf8(&self.line)
                .ok()
                .and_then(|text| text.parse::<i64>().ok())
                .unwrap_or(-1)
        };
        match kind {
            b'$' | b'!' | b'=' => match usize::try_from(length()) {
                Ok(len) => {
                    self.expect = Expect::Bulk { left: len + 2 };
                    // Only the first element of a top-level command.
                    if self.reading_head && self.open.len() != 1 {
                        self.reading_head = false;
                    }
                    false
                }
                Err(_) => self.element_done(),
            },
            b'*' | b'~' | b'>' | b'%' | b'|' => {
                let count = length();
                let count = if matches!(kind, b'%' | b'|') {
                    count.saturating_mul(2)
                } else {
                    count
                };
                match u64::try_from(count) {
                    Ok(count) if count > 0 => {
                        self.open.push(count);
                        self.expect = Expect::Type;
                        false
                    }
                    _ => {
                        if self.reading_head && self.open.is_empty() {
                            // An empty command: it counts.
                            self.reading_head = false;
                            self.name_read();
                        }
                        self.element_done()
                    }
                }
            }
            _ => {
                if self.reading_head {
                    // A command whose name is not a bulk string.
                    self.reading_head = false;
                    self.name_read();
                }
                self.element_done()
            }
        }
    }

    /// A value is complete; whether it was a top-level one.
    fn element_done(&mut self) -> bool {
        self.expect = Expect::Type;
        while let Some(left) = self.open.last_mut() {
            *left -= 1;
            if *left > 0 {
                return false;
            }
            self.open.pop();
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans_of(counting: Counting, chunks: &[&[u8]]) -> Vec<Vec<Span>> {
        let mut framer = Framer::new(counting);
        chunks.iter().map(|chunk| framer.feed(chunk)).collect()
    }

    fn span(index: Option<u64>, start: usize, end: Option<usize>) -> Span {
        Span { index, start, end }
    }

    #[test]
    fn replies_are_numbered_and_pushes_are_not() {
        let stream: &[u8] = b"+OK\r\n>3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n:5\r\n";
        let spans = spans_of(Counting::Replies, &[stream]);
        assert_eq!(
            spans[0],
            vec![
                span(Some(0), 0, Some(5)),
                span(None, 5, Some(36)),
                span(Some(1), 36, Some(40)),
            ]
        );
    }

    #[test]
    fn a_value_split_anywhere_is_found_whole() {
        let stream: &[u8] = b"*1\r\n$3\r\nabc\r\n%1\r\n+k\r\n_\r\n-ERR x\r\n";
        for cut in 0..=stream.len() {
            let (a, b) = stream.split_at(cut);
            let spans = spans_of(Counting::Replies, &[a, b]);
            // Each value's number and where it ends in the whole stream.
            let ends: Vec<(Option<u64>, usize)> = spans[0]
                .iter()
                .filter_map(|s| s.end.map(|end| (s.index, end)))
                .chain(
                    spans[1]
                        .iter()
                        .filter_map(|s| s.end.map(|end| (s.index, cut + end))),
                )
                .collect();
            assert_eq!(
                ends,
                vec![(Some(0), 13), (Some(1), 24), (Some(2), 32)],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn subscribe_commands_are_not_numbered() {
        let stream: &[u8] =
            b"*2\r\n$9\r\nSUBSCRIBE\r\n$1\r\nc\r\n*1\r\n$4\r\nPING\r\n*3\r\n$7\r\nEVALSHA\r\n$1\r\na\r\n$1\r\n0\r\n";
        let spans = spans_of(Counting::Commands, &[stream]);
        let indexes: Vec<Option<u64>> = spans[0].iter().map(|s| s.index).collect();
        assert_eq!(indexes, vec![None, Some(0), Some(1)]);
    }

    #[test]
    fn commands_lost_on_the_way_are_not_numbered() {
        let ping: &[u8] = b"*1\r\n$4\r\nPING\r\n";
        let mut framer = Framer::new(Counting::Commands);
        assert_eq!(framer.feed(ping)[0].index, Some(0));
        assert_eq!(framer.feed_lost(ping)[0].index, None);
        assert_eq!(framer.feed(ping)[0].index, Some(1));
    }

    #[test]
    fn nil_and_empty_values_end_at_their_header() {
        let stream: &[u8] = b"$-1\r\n*-1\r\n*0\r\n:1\r\n";
        let spans = spans_of(Counting::Replies, &[stream]);
        let ends: Vec<usize> = spans[0].iter().filter_map(|s| s.end).collect();
        assert_eq!(ends, vec![5, 10, 14, 18]);
    }
}
