//! Plain-text tables: one row per implementation, one column per metric, then ratio
//! columns (`value / value of a reference row`).

use std::fmt::Write as _;
use std::time::Duration;

/// How a column's numbers are shown.
#[derive(Debug, Clone, Copy)]
pub enum Unit {
    /// Nanoseconds, shown as ns/µs/ms/s (may be negative).
    Time,
    /// Per second.
    Rate,
    /// A number with this many decimals.
    Num(usize),
    /// KiB, shown as MiB.
    KiB,
    /// A fraction, shown as a percentage.
    Pct,
}

#[derive(Debug, Clone)]
pub enum Cell {
    Val(f64),
    /// A value with a remark after it, e.g. `1.02 s (8 of 50)`.
    ValNote(f64, String),
    Text(String),
    Empty,
}

impl Cell {
    pub fn time(d: Duration) -> Cell {
        Cell::Val(d.as_nanos() as f64)
    }

    fn value(&self) -> Option<f64> {
        match self {
            Cell::Val(v) | Cell::ValNote(v, _) => Some(*v),
            _ => None,
        }
    }
}

struct RatioCol {
    col: usize,
    /// The name of the reference row; a column whose reference row is absent is left out.
    reference: String,
    head: String,
}

pub struct Table {
    title: String,
    heads: Vec<(String, Unit)>,
    rows: Vec<(String, Vec<Cell>)>,
    ratios: Vec<RatioCol>,
    notes: Vec<String>,
}

impl Table {
    pub fn new(title: impl Into<String>, heads: &[(&str, Unit)]) -> Table {
        Table {
            title: title.into(),
            heads: heads.iter().map(|(h, u)| ((*h).to_string(), *u)).collect(),
            rows: Vec::new(),
            ratios: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Adds a row and returns its index.
    pub fn row(&mut self, name: impl Into<String>, cells: Vec<Cell>) -> usize {
        assert_eq!(cells.len(), self.heads.len(), "one cell per column");
        self.rows.push((name.into(), cells));
        self.rows.len() - 1
    }

    /// Adds a ratio column: column `col` of each row divided by that of the row named
    /// `reference` (left out when there is no such row, e.g. a contender filtered out).
    pub fn ratio(&mut self, col: usize, reference: &str, head: impl Into<String>) {
        self.ratios.push(RatioCol {
            col,
            reference: reference.to_string(),
            head: head.into(),
        });
    }

    /// [`Table::ratio`] for each `(col, reference, head)`.
    pub fn ratios(&mut self, specs: &[(usize, &str, &str)]) {
        for &(col, reference, head) in specs {
            self.ratio(col, reference, head);
        }
    }

    /// The ratio columns whose reference row exists, with that row's index.
    fn ratio_cols(&self) -> Vec<(&RatioCol, usize)> {
        self.ratios
            .iter()
            .filter_map(|r| {
                let i = self
                    .rows
                    .iter()
                    .position(|(name, _)| *name == r.reference)?;
                Some((r, i))
            })
            .collect()
    }

    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    pub fn render(&self) -> String {
        let mut header: Vec<String> = vec!["implementation".to_string()];
        header.extend(self.heads.iter().map(|(h, _)| h.clone()));
        let ratios = self.ratio_cols();
        header.extend(ratios.iter().map(|(r, _)| r.head.clone()));
        let mut lines: Vec<Vec<String>> = vec![header];
        for (name, cells) in &self.rows {
            let mut line = vec![name.clone()];
            for (cell, (_, unit)) in cells.iter().zip(&self.heads) {
                line.push(match cell {
                    Cell::Val(v) => fmt_value(*v, *unit),
                    Cell::ValNote(v, note) => format!("{} {note}", fmt_value(*v, *unit)),
                    Cell::Text(t) => t.clone(),
                    Cell::Empty => "-".to_string(),
                });
            }
            for &(r, reference) in &ratios {
                let num = cells[r.col].value();
                let den = self.rows[reference].1[r.col].value();
                line.push(match (num, den) {
                    (Some(n), Some(d)) if d != 0.0 => format!("{:.2}x", n / d),
                    _ => "-".to_string(),
                });
            }
            lines.push(line);
        }
        let cols = lines[0].len();
        let widths: Vec<usize> = (0..cols)
            .map(|c| {
                lines
                    .iter()
                    .map(|l| l[c].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        let _ = writeln!(out, "{}", self.title);
        for (i, line) in lines.iter().enumerate() {
            let mut text = String::new();
            for (c, cell) in line.iter().enumerate() {
                if c == 0 {
                    let _ = write!(text, "{cell:<w$}", w = widths[0]);
                } else {
                    let _ = write!(text, "  {cell:>w$}", w = widths[c]);
                }
            }
            let _ = writeln!(out, "{}", text.trim_end());
            if i == 0 {
                let total = widths.iter().sum::<usize>() + 2 * (cols - 1);
                let _ = writeln!(out, "{}", "-".repeat(total));
            }
        }
        for note in &self.notes {
            let _ = writeln!(out, "  {note}");
        }
        out
    }
}

/// `v` as a column of `unit` shows it.
pub fn fmt_value(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Time => fmt_ns(v),
        Unit::Rate => {
            if v.abs() >= 100.0 {
                format!("{v:.0}/s")
            } else {
                format!("{v:.1}/s")
            }
        }
        Unit::Num(decimals) => format!("{v:.decimals$}"),
        Unit::KiB => format!("{:.1} MiB", v / 1024.0),
        Unit::Pct => format!("{:.1}%", v * 100.0),
    }
}

/// Nanoseconds as a short human-readable duration; keeps the sign.
pub fn fmt_ns(ns: f64) -> String {
    let a = ns.abs();
    let sign = if ns < 0.0 { "-" } else { "" };
    if a < 1e3 {
        format!("{sign}{a:.0}ns")
    } else if a < 1e6 {
        format!("{sign}{:.1}µs", a / 1e3)
    } else if a < 1e9 {
        format!("{sign}{:.2}ms", a / 1e6)
    } else {
        format!("{sign}{:.2}s", a / 1e9)
    }
}
