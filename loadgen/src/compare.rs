//! `compare A.json B.json ...`: runs side by side, with each run's ratio to
//! the first.
//!
//! ```text
//! metric          ringmq               rocketmq-rust
//! msgs/s          512000               1538    (0.003x)
//! p99 µs          180                  7500    (41.67x)
//! ```
//!
//! A ratio is `value / first value`; for throughput higher is better, for
//! latency and errors lower is better, and the table says which per row.
//!
//! # Invariants
//!
//! - The first run is the reference and has no ratio column.
//! - A ratio against a zero reference is printed as `-`, never as inf/NaN.

use std::fmt::Write as _;

use crate::report::{PERCENTILES, Summary};

/// How comparison text is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareFormat {
    /// Aligned columns for a terminal.
    Text,
    /// A GitHub-flavoured markdown table.
    Markdown,
}

/// One metric row: its name, whether higher is better, and its values.
struct Row {
    name: String,
    higher_is_better: bool,
    values: Vec<f64>,
    decimals: usize,
}

fn rows(runs: &[Summary]) -> Vec<Row> {
    let collect = |get: &dyn Fn(&Summary) -> f64| runs.iter().map(get).collect::<Vec<f64>>();
    let mut rows = vec![
        Row {
            name: "msgs/s".into(),
            higher_is_better: true,
            values: collect(&Summary::msgs_per_s),
            decimals: 0,
        },
        Row {
            name: "MB/s".into(),
            higher_is_better: true,
            values: collect(&Summary::mb_per_s),
            decimals: 2,
        },
        Row {
            name: "errors".into(),
            higher_is_better: false,
            values: collect(&|run| run.errors() as f64),
            decimals: 0,
        },
    ];
    for (index, (_, label)) in PERCENTILES.iter().enumerate() {
        rows.push(Row {
            name: format!("{label} µs"),
            higher_is_better: false,
            values: collect(&|run| run.message_latency.percentiles_us[index]),
            decimals: 0,
        });
    }
    rows.push(Row {
        name: "max µs".into(),
        higher_is_better: false,
        values: collect(&|run| run.message_latency.max_us),
        decimals: 0,
    });
    rows
}

/// The ratio of `value` to `reference`, or `None` when the reference is 0.
pub fn ratio(value: f64, reference: f64) -> Option<f64> {
    if reference == 0.0 {
        None
    } else {
        Some(value / reference)
    }
}

fn cell(row: &Row, index: usize) -> String {
    let value = row.values[index];
    let text = format!("{value:.*}", row.decimals);
    if index == 0 {
        return text;
    }
    match ratio(value, row.values[0]) {
        Some(r) if r < 0.01 => format!("{text} ({r:.4}x)"),
        Some(r) => format!("{text} ({r:.2}x)"),
        None => format!("{text} (-)"),
    }
}

/// Formats `runs` side by side; the first is the reference.
///
/// # Panics
///
/// If `runs` is empty.
pub fn compare(runs: &[Summary], format: CompareFormat) -> String {
    assert!(!runs.is_empty(), "compare needs at least one run");
    let rows = rows(runs);
    let mut out = String::new();
    let names: Vec<&str> = runs.iter().map(|run| run.info.name.as_str()).collect();
    match format {
        CompareFormat::Markdown => {
            let _ = writeln!(out, "| metric | {} |", names.join(" | "));
            let _ = writeln!(out, "|---|{}", "---:|".repeat(names.len()));
            for row in &rows {
                let cells: Vec<String> = (0..names.len()).map(|i| cell(row, i)).collect();
                let _ = writeln!(out, "| {} | {} |", row.name, cells.join(" | "));
            }
        }
        CompareFormat::Text => {
            let width = 22;
            let _ = write!(out, "{:<14}", "metric");
            for name in &names {
                let _ = write!(out, " {name:<width$}");
            }
            let _ = writeln!(out, " better");
            for row in &rows {
                let _ = write!(out, "{:<14}", row.name);
                for index in 0..names.len() {
                    let _ = write!(out, " {:<width$}", cell(row, index));
                }
                let _ = writeln!(
                    out,
                    " {}",
                    if row.higher_is_better {
                        "higher"
                    } else {
                        "lower"
                    }
                );
            }
        }
    }
    let commits: Vec<String> = runs
        .iter()
        .map(|run| format!("{}={}", run.info.name, short(&run.info.git_commit)))
        .collect();
    let _ = writeln!(out, "\ncommits: {}", commits.join(", "));
    out
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hist::IntervalStats;
    use crate::report::{Machine, RunInfo};

    fn run(name: &str, latency_us: u64, count: u64) -> Summary {
        let mut stats = IntervalStats::new();
        for _ in 0..count {
            stats.record_success(latency_us, 1, 100);
        }
        let info = RunInfo {
            name: name.into(),
            command: "test".into(),
            git_commit: "0123456789abcdef".into(),
            machine: Machine {
                nproc: 2,
                kernel: "Linux".into(),
            },
            config: vec![],
            started_at_unix_ms: 0,
        };
        Summary::new(info, &stats, 1_000_000)
    }

    #[test]
    fn ratio_against_zero_is_none() {
        assert_eq!(ratio(5.0, 0.0), None);
        assert_eq!(ratio(5.0, 2.0), Some(2.5));
    }

    #[test]
    fn text_shows_values_and_ratios_to_the_first_run() {
        let text = compare(
            &[run("a", 100, 1000), run("b", 200, 500)],
            CompareFormat::Text,
        );
        let msgs = text.lines().find(|l| l.starts_with("msgs/s")).unwrap();
        assert!(
            msgs.contains("1000") && msgs.contains("500 (0.50x)"),
            "{msgs}"
        );
        let p99 = text.lines().find(|l| l.starts_with("p99 µs")).unwrap();
        assert!(p99.contains("100") && p99.contains("200 (2.00x)"), "{p99}");
        assert!(p99.ends_with("lower"), "{p99}");
        assert!(
            text.contains("commits: a=0123456789ab, b=0123456789ab"),
            "{text}"
        );
    }

    #[test]
    fn markdown_has_one_column_per_run() {
        let text = compare(
            &[run("a", 10, 10), run("b", 10, 10), run("c", 10, 0)],
            CompareFormat::Markdown,
        );
        let mut lines = text.lines();
        assert_eq!(lines.next().unwrap(), "| metric | a | b | c |");
        assert_eq!(lines.next().unwrap(), "|---|---:|---:|---:|");
        let msgs = lines.next().unwrap();
        assert_eq!(msgs, "| msgs/s | 10 | 10 (1.00x) | 0 (0.0000x) |");
        let errors = text.lines().find(|l| l.starts_with("| errors")).unwrap();
        assert_eq!(errors, "| errors | 0 | 0 (-) | 0 (-) |");
    }
}
