//! Run with `cargo run --example simulate > docs/algorithms.svg`.
//!
//! Prints one SVG picture of which requests each of the seven algorithms allows for one
//! request pattern: one lane per algorithm, a tall green bar for an allowed request and a
//! short red bar for a denied one, along a time axis three periods long. The decisions are
//! the real ones: each algorithm runs in a `MemoryStore` on a `ManualClock` set to each
//! request's time.
//!
//! Flags (or environment variables):
//!
//! - `--pattern` (`PATTERN`): `burst` (default; bursts of twice the limit at a quarter, three
//!   quarters and one and a half periods), `steady` (twice the allowed rate, evenly spaced) or `boundary` (the limit just
//!   before a window boundary and again just after it).
//! - `--quota` (`QUOTA`): a quota such as `5/10s` (the default) or `10/min; burst=3`. A burst
//!   is given to the three bucket algorithms only (the window algorithms have none).
//!
//! A bad value exits with status 2 and says what is wrong.

use std::fmt::Write as _;
use std::str::FromStr;

use tollgate::store::{MemoryStore, Policy};
use tollgate::{clock::ManualClock, Algorithm, ConfigError, Quota};

fn main() {
    let arg = |flag: &str, env: &str, default: &str| {
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            if a == flag {
                return args.next().unwrap_or_default();
            }
            if let Some(value) = a.strip_prefix(&format!("{flag}=")) {
                return value.to_owned();
            }
        }
        std::env::var(env).unwrap_or_else(|_| default.to_owned())
    };
    let pattern = arg("--pattern", "PATTERN", "burst");
    let quota = arg("--quota", "QUOTA", "5/10s");
    match render_from(&pattern, &quota) {
        Ok(svg) => print!("{svg}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}

/// Parses the pattern and quota and draws the picture.
pub fn render_from(pattern: &str, quota: &str) -> Result<String, ConfigError> {
    let pattern: Pattern = pattern.parse()?;
    let quota: Quota = quota.parse().map_err(|e: ConfigError| e.context("quota"))?;
    render(pattern, quota)
}

/// Which requests a client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// Twice the limit at once, at a quarter, three quarters and one and a half periods.
    Burst,
    /// Twice the allowed rate, evenly spaced, for three periods.
    Steady,
    /// The limit just before a window boundary and the limit just after it.
    Boundary,
}

impl FromStr for Pattern {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "burst" => Ok(Pattern::Burst),
            "steady" => Ok(Pattern::Steady),
            "boundary" => Ok(Pattern::Boundary),
            other => Err(ConfigError::with_kind(
                tollgate::ConfigErrorKind::Rule,
                format!("unknown pattern {other:?} (use burst, steady or boundary)"),
            )),
        }
    }
}

impl Pattern {
    fn name(self) -> &'static str {
        match self {
            Pattern::Burst => "burst",
            Pattern::Steady => "steady",
            Pattern::Boundary => "boundary",
        }
    }

    /// Request times in µs from the start of the picture, which is a window boundary.
    fn times(self, limit: u64, period: u64) -> Vec<u64> {
        match self {
            Pattern::Burst => {
                let gap = period / (10 * limit);
                let burst = |from: u64| (0..2 * limit).map(move |i| from + i * gap);
                burst(period / 4)
                    .chain(burst(period + period / 4))
                    .collect()
            }
            Pattern::Steady => {
                let gap = period / (2 * limit);
                (0..6 * limit).map(|i| gap / 2 + i * gap).collect()
            }
            Pattern::Boundary => {
                let gap = period / (10 * limit);
                let before = (0..limit).map(|i| period - (limit - i) * gap);
                let after = (0..limit).map(|i| period + i * gap);
                before.chain(after).collect()
            }
        }
    }
}

const WIDTH: u64 = 960;
const LABEL_WIDTH: u64 = 220;
const RIGHT_MARGIN: u64 = 30;
const TOP: u64 = 70;
const LANE_HEIGHT: u64 = 40;
const PERIODS: u64 = 3;

/// Draws which requests of `pattern` each algorithm allows under `quota`.
pub fn render(pattern: Pattern, quota: Quota) -> Result<String, ConfigError> {
    let period = u64::try_from(quota.period().as_micros()).unwrap_or(u64::MAX);
    let limit = u64::from(quota.limit());
    let times = pattern.times(limit, period);
    let span = PERIODS * period;
    let plot_width = WIDTH - LABEL_WIDTH - RIGHT_MARGIN;
    let x = |t: u64| LABEL_WIDTH as f64 + t as f64 * plot_width as f64 / span as f64;
    // A start on a window boundary (a multiple of the period since the epoch), far from zero.
    let start = (1_700_000_000_000_000 / period + 1) * period;

    let height = TOP + LANE_HEIGHT * Algorithm::ALL.len() as u64 + 50;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="13">"#
    );
    let _ = writeln!(
        svg,
        r##"<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        svg,
        r#"<text x="10" y="22" font-size="15" font-weight="bold">{} requests ({}), quota {}</text>"#,
        times.len(),
        pattern.name(),
        escape(&quota_label(&quota)),
    );
    let _ = writeln!(
        svg,
        r##"<text x="10" y="44"><tspan fill="#2e7d32">▮ allowed</tspan>  <tspan fill="#c62828">▪ denied</tspan>  (dashed lines: window boundaries)</text>"##
    );

    for (lane, algorithm) in Algorithm::ALL.into_iter().enumerate() {
        let quota = if takes_burst(algorithm) {
            quota
        } else {
            Quota::new(quota.limit(), quota.period())?
        };
        let policy = Policy::new("simulate", quota, algorithm)?;
        let clock = ManualClock::new(start);
        let store = MemoryStore::with_clock(clock.clone());
        let decisions: Vec<(u64, bool)> = times
            .iter()
            .map(|&t| {
                clock.set(start + t);
                (t, store.check_now("client", &policy, 1).allowed)
            })
            .collect();
        let allowed = decisions.iter().filter(|(_, a)| *a).count();
        let top = TOP + lane as u64 * LANE_HEIGHT;
        let middle = top + LANE_HEIGHT / 2;
        let _ = writeln!(
            svg,
            r#"<g class="lane" data-algorithm="{name}" data-allowed="{allowed}">"#,
            name = algorithm.as_str()
        );
        if lane % 2 == 0 {
            let _ = writeln!(
                svg,
                r##"<rect x="0" y="{top}" width="{WIDTH}" height="{LANE_HEIGHT}" fill="#f3f3f3"/>"##
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="10" y="{}">{} ({allowed}/{})</text>"#,
            middle + 5,
            algorithm.as_str(),
            decisions.len()
        );
        for (t, allowed) in decisions {
            let (color, bar_top, bar_height) = if allowed {
                ("#2e7d32", middle - 12, 24)
            } else {
                ("#c62828", middle + 4, 8)
            };
            let _ = writeln!(
                svg,
                r#"<rect x="{:.1}" y="{bar_top}" width="2" height="{bar_height}" fill="{color}"/>"#,
                x(t) - 1.0
            );
        }
        let _ = writeln!(svg, "</g>");
    }

    let axis = TOP + LANE_HEIGHT * Algorithm::ALL.len() as u64;
    let _ = writeln!(
        svg,
        r##"<line x1="{LABEL_WIDTH}" y1="{axis}" x2="{}" y2="{axis}" stroke="#333"/>"##,
        WIDTH - RIGHT_MARGIN
    );
    for p in 0..=PERIODS {
        let px = x(p * period);
        let _ = writeln!(
            svg,
            r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{}" stroke="#888" stroke-dasharray="4 3"/>"##,
            axis + 5
        );
        let _ = writeln!(
            svg,
            r#"<text x="{px:.1}" y="{}" text-anchor="middle">{}</text>"#,
            axis + 22,
            escape(&duration_label(quota.period() * p as u32))
        );
    }
    let _ = writeln!(svg, "</svg>");
    Ok(svg)
}

/// Whether the algorithm takes a burst (the three bucket algorithms).
fn takes_burst(algorithm: Algorithm) -> bool {
    matches!(
        algorithm,
        Algorithm::Gcra | Algorithm::TokenBucket | Algorithm::LeakyBucket
    )
}

fn quota_label(quota: &Quota) -> String {
    let mut label = format!("{}/{}", quota.limit(), duration_label(quota.period()));
    if let Some(burst) = quota.burst_setting() {
        let _ = write!(label, "; burst={burst}");
    }
    label
}

fn duration_label(d: std::time::Duration) -> String {
    format!("{:?}", d)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    //! The picture: well-formed SVG with one lane per algorithm (`cargo test --example simulate`).

    use super::render_from;
    use tollgate::Algorithm;

    /// The lanes of `svg`: (algorithm name, allowed count, the lane's label text).
    fn lanes(svg: &str) -> Vec<(String, usize, String)> {
        let doc = roxmltree::Document::parse(svg).expect("well-formed XML");
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        doc.descendants()
            .filter(|n| n.attribute("class") == Some("lane"))
            .map(|lane| {
                let label = lane
                    .children()
                    .find(|c| c.has_tag_name("text"))
                    .and_then(|t| t.text())
                    .unwrap_or_default()
                    .to_owned();
                (
                    lane.attribute("data-algorithm")
                        .unwrap_or_default()
                        .to_owned(),
                    lane.attribute("data-allowed")
                        .and_then(|a| a.parse().ok())
                        .unwrap_or(usize::MAX),
                    label,
                )
            })
            .collect()
    }

    #[test]
    fn every_pattern_draws_seven_labelled_lanes() {
        for pattern in ["burst", "steady", "boundary"] {
            let svg = render_from(pattern, "5/10s").unwrap();
            let lanes = lanes(&svg);
            let names: Vec<_> = lanes.iter().map(|(name, _, _)| name.as_str()).collect();
            let expected: Vec<_> = Algorithm::ALL.iter().map(|a| a.as_str()).collect();
            assert_eq!(names, expected, "{pattern}");
            for (name, _, label) in &lanes {
                assert!(label.starts_with(&format!("{name} (")), "{label}");
            }
        }
    }

    #[test]
    fn the_boundary_burst_shows_the_fixed_window_letting_twice_the_limit_through() {
        let svg = render_from("boundary", "5/10s").unwrap();
        let allowed: Vec<_> = lanes(&svg)
            .into_iter()
            .map(|(name, allowed, _)| (name, allowed))
            .collect();
        let of = |name: &str| allowed.iter().find(|(n, _)| n == name).unwrap().1;
        assert_eq!(of("fixed_window"), 10);
        assert_eq!(of("sliding_window_log"), 5);
        assert_eq!(of("gcra"), 5);
        assert_eq!(of("fixed_window_from_first"), 5);
    }

    #[test]
    fn a_bad_pattern_or_quota_is_a_clear_error() {
        let e = render_from("zigzag", "5/10s").unwrap_err();
        assert!(e.to_string().contains("unknown pattern \"zigzag\""), "{e}");
        let e = render_from("burst", "0/s").unwrap_err();
        assert!(e.to_string().contains("quota"), "{e}");
    }

    #[test]
    fn the_committed_picture_is_what_the_example_prints() {
        let committed = include_str!("../docs/algorithms.svg");
        assert_eq!(committed, render_from("boundary", "5/10s").unwrap());
    }
}
