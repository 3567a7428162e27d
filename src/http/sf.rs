//! A small, tolerant reader for the structured fields (RFC 8941) of the
//! `RateLimit` headers: a comma-separated list of members, each an item or a
//! `key=item` pair, with `;key=item` parameters.
//!
//! Only what the rate-limit drafts use is read: integers, decimals, strings,
//! tokens and booleans. Byte sequences and inner lists are rejected. Every
//! failure is an error, never a panic: indexes are checked, numbers are
//! bounded, and only ASCII is accepted.

/// The longest integer RFC 8941 allows (15 digits).
const MAX_INTEGER_DIGITS: usize = 15;

/// A bare item.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Item {
    Integer(i64),
    Decimal(f64),
    String(String),
    Token(String),
    Boolean(bool),
}

impl Item {
    /// The item as a non-negative integer, if it is one.
    pub(crate) fn as_count(&self) -> Option<u64> {
        match *self {
            Item::Integer(value) => u64::try_from(value).ok(),
            _ => None,
        }
    }

    /// The item as a name: a string or a token.
    pub(crate) fn as_name(&self) -> Option<&str> {
        match self {
            Item::String(name) | Item::Token(name) => Some(name),
            _ => None,
        }
    }
}

/// One list or dictionary member: `key=item;params`, or `item;params`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Member {
    /// The dictionary key, for `key=item` members.
    pub(crate) key: Option<String>,
    pub(crate) item: Item,
    pub(crate) params: Vec<(String, Item)>,
}

impl Member {
    /// The value of parameter `name`, if present (the last one wins, as in
    /// RFC 8941).
    pub(crate) fn param(&self, name: &str) -> Option<&Item> {
        self.params
            .iter()
            .rev()
            .find(|(key, _)| key == name)
            .map(|(_, item)| item)
    }
}

/// Parses a list (or dictionary) of members.
pub(crate) fn parse_members(input: &str) -> Result<Vec<Member>, &'static str> {
    if !input.is_ascii() {
        return Err("not ASCII");
    }
    let mut parser = Parser {
        input: input.as_bytes(),
        at: 0,
    };
    let mut members = Vec::new();
    parser.skip_spaces();
    while !parser.done() {
        members.push(parser.member()?);
        parser.skip_spaces();
        if parser.done() {
            break;
        }
        parser.expect(b',')?;
        parser.skip_spaces();
        if parser.done() {
            return Err("trailing comma");
        }
    }
    Ok(members)
}

struct Parser<'a> {
    input: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn done(&self) -> bool {
        self.at >= self.input.len()
    }

    fn peek(&self) -> Option<u8> {
        self.input.get(self.at).copied()
    }

    fn skip_spaces(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), &'static str> {
        if self.peek() != Some(byte) {
            return Err("unexpected character");
        }
        self.at += 1;
        Ok(())
    }

    fn member(&mut self) -> Result<Member, &'static str> {
        let starts_key = matches!(self.peek(), Some(b'a'..=b'z' | b'*'));
        let (key, item) = if starts_key {
            let key = self.key()?;
            if self.peek() == Some(b'=') {
                self.at += 1;
                (Some(key), self.bare_item()?)
            } else if self.peek() == Some(b';') || self.done() || self.peek() == Some(b',') {
                // A lowercase token and a value-less dictionary key read alike.
                (Some(key.clone()), Item::Token(key))
            } else {
                // A token that went on past key characters (`Default`, `a/b`).
                self.at -= key.len();
                (None, self.bare_item()?)
            }
        } else {
            (None, self.bare_item()?)
        };
        let params = self.params()?;
        Ok(Member { key, item, params })
    }

    fn params(&mut self) -> Result<Vec<(String, Item)>, &'static str> {
        let mut params = Vec::new();
        while self.peek() == Some(b';') {
            self.at += 1;
            self.skip_spaces();
            let key = self.key()?;
            let value = if self.peek() == Some(b'=') {
                self.at += 1;
                self.bare_item()?
            } else {
                Item::Boolean(true)
            };
            params.push((key, value));
        }
        Ok(params)
    }

    fn key(&mut self) -> Result<String, &'static str> {
        let start = self.at;
        if !matches!(self.peek(), Some(b'a'..=b'z' | b'*')) {
            return Err("a key must start with a lowercase letter or `*`");
        }
        while matches!(
            self.peek(),
            Some(b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' | b'*')
        ) {
            self.at += 1;
        }
        Ok(self.text(start))
    }

    fn bare_item(&mut self) -> Result<Item, &'static str> {
        match self.peek() {
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b'"') => self.string(),
            Some(b'?') => self.boolean(),
            Some(b'A'..=b'Z' | b'a'..=b'z' | b'*') => Ok(Item::Token(self.token())),
            Some(_) => Err("unsupported item"),
            None => Err("missing item"),
        }
    }

    fn number(&mut self) -> Result<Item, &'static str> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        let digits_start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9' | b'.')) {
            self.at += 1;
        }
        let digits = &self.input[digits_start..self.at];
        let text = self.text(start);
        if digits.is_empty() || digits.len() > MAX_INTEGER_DIGITS + 1 {
            return Err("a number has 1 to 15 digits");
        }
        if digits.contains(&b'.') {
            return text
                .parse()
                .map(Item::Decimal)
                .map_err(|_| "invalid decimal");
        }
        if digits.len() > MAX_INTEGER_DIGITS {
            return Err("an integer has at most 15 digits");
        }
        text.parse()
            .map(Item::Integer)
            .map_err(|_| "invalid integer")
    }

    fn string(&mut self) -> Result<Item, &'static str> {
        self.at += 1; // the opening quote
        let mut value = String::new();
        loop {
            match self.peek() {
                None => return Err("unterminated string"),
                Some(b'"') => {
                    self.at += 1;
                    return Ok(Item::String(value));
                }
                Some(b'\\') => {
                    self.at += 1;
                    match self.peek() {
                        Some(escaped @ (b'"' | b'\\')) => value.push(char::from(escaped)),
                        _ => return Err("invalid escape in string"),
                    }
                }
                Some(byte @ 0x20..=0x7e) => value.push(char::from(byte)),
                Some(_) => return Err("control character in string"),
            }
            self.at += 1;
        }
    }

    fn boolean(&mut self) -> Result<Item, &'static str> {
        self.at += 1; // the `?`
        let value = match self.peek() {
            Some(b'1') => true,
            Some(b'0') => false,
            _ => return Err("a boolean is ?0 or ?1"),
        };
        self.at += 1;
        Ok(Item::Boolean(value))
    }

    fn token(&mut self) -> String {
        let start = self.at;
        while matches!(
            self.peek(),
            Some(byte) if byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&byte)
        ) {
            self.at += 1;
        }
        self.text(start)
    }

    /// The input from `start` to the cursor (ASCII, so always valid UTF-8).
    fn text(&self, start: usize) -> String {
        String::from_utf8_lossy(&self.input[start..self.at]).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_list_items_with_parameters() {
        let members = parse_members(r#""default";r=0;t=10, "daily";q=1000;w=86400"#).unwrap();
        assert_eq!(members.len(), 2);
        assert_eq!(members[0].item, Item::String("default".into()));
        assert_eq!(members[0].param("r"), Some(&Item::Integer(0)));
        assert_eq!(members[1].param("w"), Some(&Item::Integer(86_400)));
    }

    #[test]
    fn reads_dictionary_members() {
        let members = parse_members("limit=100, remaining=0, reset=5").unwrap();
        assert_eq!(members[1].key.as_deref(), Some("remaining"));
        assert_eq!(members[2].item, Item::Integer(5));
    }

    #[test]
    fn reads_tokens_and_escapes() {
        let members = parse_members(r#"Default;q=1, "a\"b";w=2;flag"#).unwrap();
        assert_eq!(members[0].item, Item::Token("Default".into()));
        assert_eq!(members[1].item, Item::String("a\"b".into()));
        assert_eq!(members[1].param("flag"), Some(&Item::Boolean(true)));
    }

    #[test]
    fn rejects_garbage() {
        for input in [
            "\"open",
            "a=",
            "1234567890123456",
            "x;=1",
            "a,",
            ":Ynl0ZXM=:",
            "\"é\"",
            "a=1 b=2",
        ] {
            assert!(parse_members(input).is_err(), "{input:?}");
        }
    }
}
