//! The report helpers (`swa_zoo::report`): the heat-map ramp, SVG plots, CSV files, and the
//! errors that name an unwritable path.

use std::path::{Path, PathBuf};

use swa_zoo::report::ReportError;
use swa_zoo::report::attention_map::colour;
use swa_zoo::report::csv::write_csv;
use swa_zoo::report::plot::{heat_map, line_plot, tidy};

#[test]
fn the_ramp_runs_from_dark_to_light() {
    assert_eq!(colour(0.0), [68, 1, 84]);
    assert_eq!(colour(1.0), [253, 231, 37]);
    assert_eq!(colour(f32::NAN), colour(0.0));
    assert_eq!(colour(2.0), colour(1.0));
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("swa-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn svg(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(
        text.trim_start().starts_with("<svg") || text.trim_start().starts_with("<?xml"),
        "{}",
        &text[..80.min(text.len())]
    );
    assert!(text.trim_end().ends_with("</svg>"));
    text
}

#[test]
fn heat_map_writes_values_labels_and_grey_nan() {
    let path = temp("heat.svg");
    let cells = vec![vec![1.234, 2.0, f64::NAN], vec![0.5, 3.5, 4.0]];
    heat_map(
        &path,
        "Bits per byte grid",
        "evaluation length",
        &[128, 1024, 16384],
        "window",
        &[64, 256],
        &cells,
        "bits",
    )
    .unwrap();
    let text = svg(&path);
    for needle in [
        "Bits per byte grid",
        "1.23",
        "16384",
        "256",
        "NaN",
        "evaluation length",
        "#BEBEBE",
        "bits",
    ] {
        assert!(text.contains(needle), "missing {needle}");
    }
    let all_nan = vec![vec![f64::NAN]];
    heat_map(&path, "Empty", "x", &[1], "y", &[1], &all_nan, "v").unwrap();
    assert!(svg(&path).contains("Empty"));
    let error = heat_map(&path, "t", "x", &[1, 2], "y", &[1], &[vec![1.0]], "v").unwrap_err();
    assert!(
        matches!(error, ReportError::Input { .. }) && error.to_string().contains("heat.svg"),
        "{error}"
    );
}

#[test]
fn line_plot_draws_linear_and_log_axes() {
    let path = temp("lines.svg");
    let series = vec![
        ("swa".to_string(), (1..=6).map(|i| ((1 << (7 + i)) as f64, i as f64 * 0.8)).collect()),
        (
            "full".to_string(),
            (1..=6).map(|i| ((1 << (7 + i)) as f64, (i * i) as f64 * 0.3)).collect(),
        ),
    ];
    for (log_x, log_y) in [(false, false), (true, false), (false, true), (true, true)] {
        line_plot(&path, "Latency against length", "tokens", "ms", &series, log_x, log_y).unwrap();
        let text = svg(&path);
        assert!(
            text.contains("Latency against length")
                && text.contains("swa")
                && text.contains("full")
        );
    }
    let flat = vec![("one".to_string(), vec![(0.0, 1.0), (f64::NAN, 2.0)])];
    line_plot(&path, "Flat", "x", "y", &flat, false, false).unwrap();
    assert!(
        line_plot(&path, "Flat", "x", "y", &flat, true, false)
            .unwrap_err()
            .to_string()
            .contains("log")
    );
}

#[test]
fn axis_labels_are_tidy() {
    let labels: Vec<String> = [1000.0, 0.5, 2.25, 1.0e7, 1.0e-4, 0.0].iter().map(tidy).collect();
    assert_eq!(labels, ["1000", "0.5", "2.25", "1.0e7", "1.0e-4", "0"]);
}

#[test]
fn an_unwritable_path_is_an_error_naming_it() {
    let path = std::env::temp_dir().join("swa-plot-no-such-dir").join("x").join("out.svg");
    let series = vec![("s".to_string(), vec![(1.0, 1.0), (2.0, 2.0)])];
    let errors = [
        heat_map(&path, "t", "x", &[1], "y", &[1], &[vec![1.0]], "v").unwrap_err(),
        line_plot(&path, "t", "x", "y", &series, false, false).unwrap_err(),
        write_csv(&path, &["a"], &[]).unwrap_err(),
    ];
    for error in errors {
        assert!(
            matches!(error, ReportError::Write(_))
                && error.to_string().contains(&path.display().to_string()),
            "{error}"
        );
    }
    let dir = path.parent().unwrap().parent().unwrap();
    assert!(!dir.exists(), "no temporary file or folder is left behind");
}

#[test]
fn csv_quotes_fields_and_checks_rows() {
    let path = std::env::temp_dir().join(format!("swa-csv-{}.csv", std::process::id()));
    let rows = vec![vec!["64".into(), "a,b".into()], vec!["128".into(), "say \"hi\"".into()]];
    write_csv(&path, &["window", "note"], &rows).unwrap();
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "window,note\n64,\"a,b\"\n128,\"say \"\"hi\"\"\"\n"
    );
    assert!(write_csv(&path, &["a"], &rows).unwrap_err().to_string().contains("row 0"));
}
