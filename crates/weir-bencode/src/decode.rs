//! The strict, borrowing decoder.

use crate::{Dict, Error, ErrorKind, Limits, List, Value};

/// Decodes exactly one value filling all of `input`, with the default
/// [`Limits`]. Trailing bytes are an error.
pub fn decode(input: &[u8]) -> Result<Value<'_>, Error> {
    decode_with(input, &Limits::DEFAULT)
}

/// Decodes exactly one value filling all of `input`, under `limits`.
pub fn decode_with<'a>(input: &'a [u8], limits: &Limits) -> Result<Value<'a>, Error> {
    let (v, used) = decode_prefix_with(input, limits)?;
    if used != input.len() {
        return Err(Error {
            offset: used,
            kind: ErrorKind::TrailingData(input.len() - used),
        });
    }
    Ok(v)
}

/// Decodes one value from the front of `input` and returns it with the
/// number of bytes it took; whatever follows is left to the caller (BEP 9
/// metadata messages put raw data after a dictionary).
pub fn decode_prefix(input: &[u8]) -> Result<(Value<'_>, usize), Error> {
    decode_prefix_with(input, &Limits::DEFAULT)
}

/// [`decode_prefix`] under explicit `limits`.
pub fn decode_prefix_with<'a>(
    input: &'a [u8],
    limits: &Limits,
) -> Result<(Value<'a>, usize), Error> {
    if input.len() > limits.max_input {
        return Err(Error {
            offset: 0,
            kind: ErrorKind::InputTooLarge {
                len: input.len(),
                max: limits.max_input,
            },
        });
    }
    let mut d = Decoder {
        input,
        pos: 0,
        max_depth: limits.max_depth,
    };
    let v = d.value(1)?;
    Ok((v, d.pos))
}

struct Decoder<'a> {
    input: &'a [u8],
    pos: usize,
    max_depth: usize,
}

impl<'a> Decoder<'a> {
    fn err<T>(&self, offset: usize, kind: ErrorKind) -> Result<T, Error> {
        Err(Error { offset, kind })
    }

    fn peek(&self) -> Result<u8, Error> {
        match self.input.get(self.pos) {
            Some(b) => Ok(*b),
            None => self.err(self.pos, ErrorKind::UnexpectedEof),
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value<'a>, Error> {
        match self.peek()? {
            b'i' => Ok(Value::Int(self.integer()?)),
            b'0'..=b'9' => Ok(Value::Bytes(self.bytes()?)),
            b'l' => {
                if depth > self.max_depth {
                    return self.err(self.pos, ErrorKind::TooDeep(self.max_depth));
                }
                let start = self.pos;
                self.pos += 1;
                let mut items = Vec::new();
                while self.peek()? != b'e' {
                    items.push(self.value(depth + 1)?);
                }
                self.pos += 1;
                Ok(Value::List(List {
                    items,
                    raw: &self.input[start..self.pos],
                }))
            }
            b'd' => {
                if depth > self.max_depth {
                    return self.err(self.pos, ErrorKind::TooDeep(self.max_depth));
                }
                let start = self.pos;
                self.pos += 1;
                let mut entries: Vec<(&'a [u8], Value<'a>)> = Vec::new();
                loop {
                    let b = self.peek()?;
                    if b == b'e' {
                        break;
                    }
                    let key_at = self.pos;
                    if !b.is_ascii_digit() {
                        return self.err(key_at, ErrorKind::KeyNotAString);
                    }
                    let key = self.bytes()?;
                    if let Some((prev, _)) = entries.last() {
                        match (*prev).cmp(key) {
                            std::cmp::Ordering::Less => {}
                            std::cmp::Ordering::Equal => {
                                return self.err(key_at, ErrorKind::DuplicateKey);
                            }
                            std::cmp::Ordering::Greater => {
                                return self.err(key_at, ErrorKind::UnsortedKey);
                            }
                        }
                    }
                    let v = self.value(depth + 1)?;
                    entries.push((key, v));
                }
                self.pos += 1;
                Ok(Value::Dict(Dict {
                    entries,
                    raw: &self.input[start..self.pos],
                }))
            }
            other => self.err(self.pos, ErrorKind::UnexpectedByte(other)),
        }
    }

    /// Parses `i<digits>e`; errors point at the `i`.
    fn integer(&mut self) -> Result<i64, Error> {
        let start = self.pos;
        self.pos += 1;
        let neg = self.peek()? == b'-';
        if neg {
            self.pos += 1;
        }
        let digits_at = self.pos;
        let mut magnitude: u64 = 0;
        loop {
            let b = self.peek()?;
            if b == b'e' {
                break;
            }
            if !b.is_ascii_digit() {
                return self.err(self.pos, ErrorKind::NotADigit(b));
            }
            magnitude = match magnitude
                .checked_mul(10)
                .and_then(|m| m.checked_add(u64::from(b - b'0')))
            {
                Some(m) => m,
                None => return self.err(start, ErrorKind::IntegerOverflow),
            };
            self.pos += 1;
        }
        let ndigits = self.pos - digits_at;
        if ndigits == 0 {
            return self.err(start, ErrorKind::EmptyInteger);
        }
        if self.input[digits_at] == b'0' && (ndigits > 1 || neg) {
            return self.err(start, ErrorKind::NonCanonicalInteger);
        }
        self.pos += 1; // the `e`
        let v = if neg {
            0i64.checked_sub_unsigned(magnitude)
        } else {
            i64::try_from(magnitude).ok()
        };
        match v {
            Some(v) => Ok(v),
            None => self.err(start, ErrorKind::IntegerOverflow),
        }
    }

    /// Parses `<len>:<bytes>`.
    fn bytes(&mut self) -> Result<&'a [u8], Error> {
        let start = self.pos;
        let mut len: u64 = 0;
        loop {
            let b = self.peek()?;
            if b == b':' {
                break;
            }
            if !b.is_ascii_digit() {
                return self.err(self.pos, ErrorKind::NotADigit(b));
            }
            len = match len
                .checked_mul(10)
                .and_then(|m| m.checked_add(u64::from(b - b'0')))
            {
                Some(m) => m,
                None => {
                    return self.err(
                        start,
                        ErrorKind::LengthPastEnd {
                            declared: u64::MAX,
                            available: self.input.len() - self.pos,
                        },
                    );
                }
            };
            self.pos += 1;
        }
        if self.input[start] == b'0' && self.pos - start > 1 {
            return self.err(start, ErrorKind::NonCanonicalLength);
        }
        self.pos += 1; // the `:`
        let available = self.input.len() - self.pos;
        if len > available as u64 {
            return self.err(
                start,
                ErrorKind::LengthPastEnd {
                    declared: len,
                    available,
                },
            );
        }
        let s = &self.input[self.pos..self.pos + len as usize];
        self.pos += len as usize;
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(input: &[u8]) -> (usize, ErrorKind) {
        let e = decode(input).unwrap_err();
        (e.offset, e.kind)
    }

    #[test]
    fn decodes_each_type() {
        assert_eq!(decode(b"i42e").unwrap(), Value::Int(42));
        assert_eq!(decode(b"i-7e").unwrap(), Value::Int(-7));
        assert_eq!(decode(b"i0e").unwrap(), Value::Int(0));
        assert_eq!(decode(b"4:spam").unwrap(), Value::Bytes(b"spam"));
        assert_eq!(decode(b"0:").unwrap(), Value::Bytes(b""));
        let l = decode(b"l4:spami3ee").unwrap();
        assert_eq!(
            l.as_list().unwrap(),
            &[Value::Bytes(b"spam"), Value::Int(3)]
        );
        let d = decode(b"d3:bar4:spam3:fooi42ee").unwrap();
        let d = d.as_dict().unwrap();
        assert_eq!(d.get(b"foo"), Some(&Value::Int(42)));
        assert_eq!(d.get(b"bar").unwrap().as_str(), Some("spam"));
        assert_eq!(d.get(b"baz"), None);
        assert_eq!(
            decode(b"i9223372036854775807e").unwrap(),
            Value::Int(i64::MAX)
        );
        assert_eq!(
            decode(b"i-9223372036854775808e").unwrap(),
            Value::Int(i64::MIN)
        );
    }

    #[test]
    fn raw_span_of_nested_dict_is_exact() {
        let input = b"d4:infod4:name1:xe5:otheri1ee";
        let v = decode(input).unwrap();
        let info = v.as_dict().unwrap().get(b"info").unwrap();
        assert_eq!(info.raw().unwrap(), b"d4:name1:xe");
        assert_eq!(v.raw().unwrap(), &input[..]);
    }

    #[test]
    fn rejects_non_canonical_integers() {
        assert_eq!(kind(b"ie"), (0, ErrorKind::EmptyInteger));
        assert_eq!(kind(b"i-e"), (0, ErrorKind::EmptyInteger));
        assert_eq!(kind(b"i-0e"), (0, ErrorKind::NonCanonicalInteger));
        assert_eq!(kind(b"i03e"), (0, ErrorKind::NonCanonicalInteger));
        assert_eq!(kind(b"i00e"), (0, ErrorKind::NonCanonicalInteger));
        assert_eq!(kind(b"i1x2e"), (2, ErrorKind::NotADigit(b'x')));
        assert_eq!(kind(b"i+1e"), (1, ErrorKind::NotADigit(b'+')));
        assert_eq!(
            kind(b"i9223372036854775808e"),
            (0, ErrorKind::IntegerOverflow)
        );
        assert_eq!(
            kind(b"i-9223372036854775809e"),
            (0, ErrorKind::IntegerOverflow)
        );
        assert_eq!(
            kind(b"i99999999999999999999999e"),
            (0, ErrorKind::IntegerOverflow)
        );
        assert_eq!(kind(b"i12"), (3, ErrorKind::UnexpectedEof));
    }

    #[test]
    fn rejects_bad_strings() {
        assert_eq!(kind(b"04:spam"), (0, ErrorKind::NonCanonicalLength));
        assert_eq!(kind(b"00:"), (0, ErrorKind::NonCanonicalLength));
        assert_eq!(
            kind(b"5:spam"),
            (
                0,
                ErrorKind::LengthPastEnd {
                    declared: 5,
                    available: 4
                }
            )
        );
        assert_eq!(kind(b"4"), (1, ErrorKind::UnexpectedEof));
        assert_eq!(kind(b"4x"), (1, ErrorKind::NotADigit(b'x')));
        assert!(matches!(
            kind(b"99999999999999999999999:x").1,
            ErrorKind::LengthPastEnd { .. }
        ));
    }

    #[test]
    fn rejects_bad_dicts() {
        assert_eq!(kind(b"d3:fooi1e3:bari2ee"), (9, ErrorKind::UnsortedKey));
        assert_eq!(kind(b"d3:fooi1e3:fooi2ee"), (9, ErrorKind::DuplicateKey));
        assert_eq!(kind(b"di1ei2ee"), (1, ErrorKind::KeyNotAString));
        assert_eq!(kind(b"d3:foo"), (6, ErrorKind::UnexpectedEof));
        assert_eq!(kind(b"d"), (1, ErrorKind::UnexpectedEof));
        // A prefix key sorts before its extension.
        assert!(decode(b"d1:ai1e2:aai2ee").is_ok());
        assert_eq!(kind(b"d2:aai1e1:ai2ee"), (8, ErrorKind::UnsortedKey));
    }

    #[test]
    fn rejects_trailing_data_and_junk() {
        assert_eq!(kind(b"i1ei2e"), (3, ErrorKind::TrailingData(3)));
        assert_eq!(kind(b""), (0, ErrorKind::UnexpectedEof));
        assert_eq!(kind(b"x"), (0, ErrorKind::UnexpectedByte(b'x')));
        assert_eq!(kind(b"lee"), (2, ErrorKind::TrailingData(1)));
        assert_eq!(decode(b"le").unwrap().as_list().unwrap().len(), 0);
    }

    #[test]
    fn prefix_leaves_the_rest() {
        let (v, n) = decode_prefix(b"d8:msg_typei1e5:piecei0eeRAWDATA").unwrap();
        assert_eq!(n, 25);
        assert_eq!(v.as_dict().unwrap().get(b"piece"), Some(&Value::Int(0)));
    }

    #[test]
    fn depth_and_size_limits() {
        let deep = |n: usize| {
            let mut v = vec![b'l'; n];
            v.extend(std::iter::repeat_n(b'e', n));
            v
        };
        assert!(decode(&deep(64)).is_ok());
        assert_eq!(kind(&deep(65)), (64, ErrorKind::TooDeep(64)));
        // Far deeper than the stack could take if recursion were unbounded.
        assert_eq!(kind(&deep(1_000_000)).1, ErrorKind::TooDeep(64));
        let small = Limits {
            max_depth: 2,
            max_input: 8,
        };
        assert!(decode_with(b"lli1eee", &small).is_ok());
        assert_eq!(
            decode_with(b"llli1eeee", &small).unwrap_err().kind,
            ErrorKind::InputTooLarge { len: 9, max: 8 }
        );
        assert_eq!(
            decode_with(b"llleee", &small).unwrap_err().kind,
            ErrorKind::TooDeep(2)
        );
    }

    #[test]
    fn error_message_names_offset() {
        let e = decode(b"d3:fooi1e3:bari2ee").unwrap_err();
        assert_eq!(
            e.to_string(),
            "bencode error at byte 9: dictionary keys are not in sorted order"
        );
    }
}
