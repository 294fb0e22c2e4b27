//! A minimal JSON writer for the reports' `to_json` (no serde dependency for two reports).

use std::fmt::Write as _;

/// A JSON object written field by field into a string.
pub(crate) struct JsonObject<'a> {
    pub(crate) out: &'a mut String,
    first: bool,
}

impl<'a> JsonObject<'a> {
    pub(crate) fn new(out: &'a mut String) -> Self {
        out.push('{');
        JsonObject { out, first: true }
    }

    pub(crate) fn key(&mut self, key: &str) {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        json_str(self.out, key);
        self.out.push(':');
    }

    pub(crate) fn str(&mut self, key: &str, value: Option<&str>) {
        self.key(key);
        json_opt_str(self.out, value);
    }

    pub(crate) fn bool(&mut self, key: &str, value: Option<bool>) {
        self.key(key);
        self.out.push_str(match value {
            Some(true) => "true",
            Some(false) => "false",
            None => "null",
        });
    }

    pub(crate) fn num(&mut self, key: &str, value: Option<i128>) {
        self.key(key);
        match value {
            Some(v) => self.out.push_str(&v.to_string()),
            None => self.out.push_str("null"),
        }
    }

    pub(crate) fn end(self) {
        self.out.push('}');
    }
}

pub(crate) fn json_opt_str(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => json_str(out, s),
        None => out.push_str("null"),
    }
}

/// Writes `s` as a JSON string literal: quotes, backslashes and control characters escaped,
/// everything else (valid UTF-8 already) as is.
pub(crate) fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

impl JsonObject<'_> {
    /// Writes `key` followed by an array of `items`, each written by `item`.
    pub(crate) fn array<T>(
        &mut self,
        key: &str,
        items: &[T],
        mut item: impl FnMut(&mut String, &T),
    ) {
        self.key(key);
        self.out.push('[');
        for (i, it) in items.iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            item(self.out, it);
        }
        self.out.push(']');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        let mut out = String::new();
        json_str(&mut out, "a\"b\\c\nd\re\tf\u{1}g\u{7f}h é ✓ 🦀");
        assert_eq!(out, r#""a\"b\\c\nd\re\tf\u0001g\u007fh é ✓ 🦀""#);
    }
}
