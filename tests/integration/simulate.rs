//! The `simulate` example's picture: well-formed SVG with one lane per algorithm.

#[path = "../../examples/simulate.rs"]
#[allow(dead_code)]
mod example;

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
        let svg = example::render_from(pattern, "5/10s").unwrap();
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
    let svg = example::render_from("boundary", "5/10s").unwrap();
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
    let e = example::render_from("zigzag", "5/10s").unwrap_err();
    assert!(e.to_string().contains("unknown pattern \"zigzag\""), "{e}");
    let e = example::render_from("burst", "0/s").unwrap_err();
    assert!(e.to_string().contains("quota"), "{e}");
}

#[test]
fn the_committed_picture_is_what_the_example_prints() {
    let committed = include_str!("../../docs/algorithms.svg");
    assert_eq!(
        committed,
        example::render_from("boundary", "5/10s").unwrap()
    );
}
