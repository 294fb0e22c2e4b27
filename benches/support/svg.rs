//! A small SVG line-chart writer for the scale curves: one chart per metric, a line per
//! contender, log or linear axes, ticks at the measured x values.
//!
//! Hand-written rather than `plotters`: its SVG backend lays text out with a font
//! implementation (`ttf`, i.e. font-kit and the system's fonts, or `ab_glyph` with a font
//! file), which is far more than a few line charts need; SVG `<text>` is laid out by the
//! viewer, so this writer needs no font at all and adds no dependency.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::support::fit::fmt_x;
use crate::support::table::{Unit, fmt_value};

const WIDTH: f64 = 860.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 270.0;
const TOP: f64 = 60.0;
const BOTTOM: f64 = 55.0;
const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#555555",
];

/// One line: a name and a y per x of the chart (NaN where nothing was measured).
pub struct Series {
    pub name: String,
    pub ys: Vec<f64>,
}

pub struct Chart {
    pub title: String,
    /// Second line under the title: when, where and how it was measured.
    pub subtitle: String,
    pub x_label: String,
    pub xs: Vec<f64>,
    pub unit: Unit,
    pub log_x: bool,
    pub log_y: bool,
    pub series: Vec<Series>,
}

/// One axis: data range to pixel range, linear or logarithmic.
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    /// Ticks fall on round multiples of this (1024 for KiB, so that they are round MiB).
    base: f64,
    from: f64,
    to: f64,
}

impl Axis {
    fn new(values: impl Iterator<Item = f64>, log: bool, base: f64, from: f64, to: f64) -> Axis {
        let ok: Vec<f64> = values
            .filter(|v| v.is_finite() && (!log || *v > 0.0))
            .collect();
        let mut lo = ok.iter().copied().fold(f64::INFINITY, f64::min);
        let mut hi = ok.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if !lo.is_finite() {
            (lo, hi) = (1.0, 10.0);
        }
        if hi <= lo {
            (lo, hi) = if log {
                (lo / 2.0, hi * 2.0)
            } else {
                (lo - 1.0, hi + 1.0)
            };
        }
        Axis {
            lo,
            hi,
            log,
            base,
            from,
            to,
        }
    }

    fn map(&self, v: f64) -> Option<f64> {
        if !v.is_finite() || (self.log && v <= 0.0) {
            return None;
        }
        let f = |x: f64| if self.log { x.ln() } else { x };
        let t = (f(v) - f(self.lo)) / (f(self.hi) - f(self.lo));
        Some(self.from + t * (self.to - self.from))
    }

    /// Up to about six round values within the range: 1-2-5 steps on a linear axis,
    /// powers of ten (or 1-2-5 multiples of them over a short range) on a log axis.
    fn ticks(&self) -> Vec<f64> {
        let mut out = Vec::new();
        let (lo, hi) = (self.lo / self.base, self.hi / self.base);
        if self.log {
            let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
            let mults: &[f64] = if b - a <= 2 { &[1.0, 2.0, 5.0] } else { &[1.0] };
            for e in a..=b {
                for m in mults {
                    let v = m * 10f64.powi(e);
                    if v >= lo * 0.999 && v <= hi * 1.001 {
                        out.push(v);
                    }
                }
            }
        } else {
            let raw = (hi - lo) / 5.0;
            let mag = 10f64.powf(raw.log10().floor());
            let step = [1.0, 2.0, 5.0, 10.0]
                .iter()
                .map(|m| m * mag)
                .find(|s| *s >= raw)
                .unwrap_or(raw);
            let mut v = (lo / step).ceil() * step;
            while v <= hi + step * 1e-9 {
                out.push(v);
                v += step;
            }
        }
        out.into_iter().map(|v| v * self.base).collect()
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

impl Chart {
    /// The chart as an SVG document.
    pub fn render(&self) -> String {
        let (x0, x1, y0, y1) = (LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP);
        let xa = Axis::new(self.xs.iter().copied(), self.log_x, 1.0, x0, x1);
        let base = if matches!(self.unit, Unit::KiB) {
            1024.0
        } else {
            1.0
        };
        let ys = self.series.iter().flat_map(|s| s.ys.iter().copied());
        // A linear y axis starts at zero, so that a ratio reads as a ratio.
        let ya = if self.log_y {
            Axis::new(ys, true, base, y0, y1)
        } else {
            Axis::new(ys.chain([0.0]), false, base, y0, y1)
        };
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{LEFT}" y="22" font-size="15" font-weight="bold">{}</text>"#,
            esc(&self.title)
        );
        let _ = writeln!(
            s,
            r##"<text x="{LEFT}" y="40" font-size="11" fill="#555">{}</text>"##,
            esc(&self.subtitle)
        );
        self.grid(&mut s, &xa, &ya);
        self.lines(&mut s, &xa, &ya);
        s.push_str("</svg>\n");
        s
    }

    fn grid(&self, s: &mut String, xa: &Axis, ya: &Axis) {
        let (x0, x1, y0, y1) = (xa.from, xa.to, ya.from, ya.to);
        for t in ya.ticks() {
            let Some(y) = ya.map(t) else { continue };
            let _ = writeln!(
                s,
                r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                x0 - 6.0,
                y + 4.0,
                esc(&fmt_value(t, self.unit))
            );
        }
        for &t in &self.xs {
            let Some(x) = xa.map(t) else { continue };
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" y1="{y0}" x2="{x:.1}" y2="{y1}" stroke="#eee"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                y0 + 16.0,
                fmt_x(t)
            );
        }
        let _ = writeln!(
            s,
            r##"<rect x="{x0}" y="{y1}" width="{:.1}" height="{:.1}" fill="none" stroke="#333"/>"##,
            x1 - x0,
            y0 - y1
        );
        let axis_note = |log: bool| if log { " (log scale)" } else { "" };
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}{}</text>"#,
            (x0 + x1) / 2.0,
            y0 + 38.0,
            esc(&self.x_label),
            axis_note(self.log_x)
        );
        let _ = writeln!(
            s,
            r#"<text x="{x0}" y="{:.1}" font-size="11">y{}</text>"#,
            y1 - 6.0,
            axis_note(self.log_y)
        );
    }

    fn lines(&self, s: &mut String, xa: &Axis, ya: &Axis) {
        for (i, series) in self.series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let pts: Vec<(f64, f64)> = self
                .xs
                .iter()
                .zip(&series.ys)
                .filter_map(|(&x, &y)| Some((xa.map(x)?, ya.map(y)?)))
                .collect();
            let path: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
                path.join(" ")
            );
            for (x, y) in &pts {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{x:.1}" cy="{y:.1}" r="3" fill="{color}"/>"#
                );
            }
            let ly = TOP + 10.0 + 18.0 * i as f64;
            let lx = WIDTH - RIGHT + 12.0;
            let _ = writeln!(
                s,
                r#"<line x1="{lx}" y1="{ly}" x2="{:.1}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{:.1}" y="{:.1}" font-size="11">{}</text>"#,
                lx + 18.0,
                lx + 24.0,
                ly + 4.0,
                esc(&series.name)
            );
        }
    }

    /// Writes the chart to `dir/file` (creating `dir`) and returns the path.
    pub fn write(&self, dir: &Path, file: &str) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(file);
        std::fs::write(&path, self.render())?;
        Ok(path)
    }
}
