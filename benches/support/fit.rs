//! How a scale curve grows, computed from its points: a least-squares line on log-log axes
//! (the exponent `b` of `y ~ x^b`), a straight line on linear axes (the cost per unit of
//! `x`), and where the log-log slope changes (the best split into two log-log lines).

use crate::support::table::{Unit, fmt_value};

/// A least-squares line `y = intercept + slope * x`.
#[derive(Debug, Clone, Copy)]
pub struct Line {
    pub slope: f64,
    pub intercept: f64,
    /// Sum of squared residuals.
    pub sse: f64,
    /// Coefficient of determination (1 for a perfect fit; 1 too when every y is equal).
    pub r2: f64,
}

/// The least-squares line through `points`; `None` with fewer than two distinct x.
pub fn least_squares(points: &[(f64, f64)]) -> Option<Line> {
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if points.len() < 2 || sxx <= f64::EPSILON {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let slope = sxy / sxx;
    let intercept = my - slope * mx;
    let sse: f64 = points
        .iter()
        .map(|p| (p.1 - intercept - slope * p.0).powi(2))
        .sum();
    let syy: f64 = points.iter().map(|p| (p.1 - my).powi(2)).sum();
    let r2 = if syy <= f64::EPSILON {
        1.0
    } else {
        1.0 - sse / syy
    };
    Some(Line {
        slope,
        intercept,
        sse,
        r2,
    })
}

/// The points with a finite, positive x and y, as `(ln x, ln y)`.
fn logs(xs: &[f64], ys: &[f64]) -> Vec<(f64, f64)> {
    xs.iter()
        .zip(ys)
        .filter(|(x, y)| x.is_finite() && y.is_finite() && **x > 0.0 && **y > 0.0)
        .map(|(x, y)| (x.ln(), y.ln()))
        .collect()
}

/// A change of log-log slope at one point of the curve.
#[derive(Debug, Clone, Copy)]
pub struct Break {
    /// The x where the two lines meet (a point of the curve).
    pub at: f64,
    pub before: f64,
    pub after: f64,
}

/// The best split of the log-log points into two lines (each of at least two points,
/// sharing the point at the split), when it explains the curve clearly better than one
/// line: the slopes differ by more than 0.3, the one line leaves a typical deviation of
/// more than 10 %, and the split removes at least 70 % of its squared residuals.
fn find_break(points: &[(f64, f64)], one: &Line) -> Option<Break> {
    let rms = (one.sse / points.len() as f64).sqrt();
    if points.len() < 4 || rms < 0.1 {
        return None;
    }
    let mut best: Option<(f64, Break)> = None;
    for k in 1..points.len() - 1 {
        let (Some(a), Some(b)) = (least_squares(&points[..=k]), least_squares(&points[k..])) else {
            continue;
        };
        let sse = a.sse + b.sse;
        if best.as_ref().is_none_or(|(s, _)| sse < *s) {
            let at = points[k].0.exp();
            best = Some((
                sse,
                Break {
                    at,
                    before: a.slope,
                    after: b.slope,
                },
            ));
        }
    }
    let (sse, brk) = best?;
    ((brk.after - brk.before).abs() > 0.3 && sse <= 0.3 * one.sse).then_some(brk)
}

/// A word for a log-log slope.
pub fn shape(b: f64) -> &'static str {
    match b {
        b if b < -0.8 => "falling about as 1/x or faster",
        b if b < -0.1 => "falling slowly",
        b if b <= 0.1 => "flat (constant)",
        b if b < 0.8 => "sublinear",
        b if b <= 1.2 => "linear",
        _ => "superlinear",
    }
}

/// One line saying how `ys` grows with `xs` (`x_unit` names one unit of x, e.g. "node"):
/// the log-log slope and its word, the linear fit's cost per unit of x, and the break if
/// there is one. Points that are missing (NaN) or not positive are left out of the
/// log-log fit.
pub fn describe(xs: &[f64], ys: &[f64], x_unit: &str, unit: Unit) -> String {
    let lin: Vec<(f64, f64)> = xs
        .iter()
        .zip(ys)
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .map(|(x, y)| (*x, *y))
        .collect();
    let log = logs(xs, ys);
    let Some(one) = least_squares(&log) else {
        return "too few positive points to fit".to_string();
    };
    let mut text = format!(
        "log-log slope {:.2} ({}, R² {:.2})",
        one.slope,
        shape(one.slope),
        one.r2
    );
    if let Some(l) = least_squares(&lin) {
        // A cost per unit in KiB is usually a few hundred bytes: show it in bytes.
        let per = match unit {
            Unit::KiB => format!("{:.0} B", l.slope.abs() * 1024.0),
            _ => fmt_value(l.slope.abs(), unit),
        };
        text.push_str(&format!(
            "; linear fit {} {} {per} per {x_unit} (R² {:.2})",
            fmt_value(l.intercept, unit),
            if l.slope < 0.0 { "-" } else { "+" },
            l.r2
        ));
    }
    match find_break(&log, &one) {
        Some(b) => text.push_str(&format!(
            "; breaks at {}: slope {:.2} up to it, {:.2} after ({})",
            fmt_x(b.at),
            b.before,
            b.after,
            shape(b.after)
        )),
        None => text.push_str("; no break"),
    }
    if log.len() < lin.len() {
        text.push_str(&format!(
            " [{} non-positive points left out of the log-log fit]",
            lin.len() - log.len()
        ));
    }
    text
}

/// An x value as the tables label it (whole numbers without decimals).
pub fn fmt_x(x: f64) -> String {
    if (x - x.round()).abs() < 1e-6 {
        format!("{}", x.round() as i64)
    } else {
        format!("{x:.2}")
    }
}
