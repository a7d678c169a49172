//! A measurement as guest_overhead and wasm_kernels report it: a [`Row`] of
//! samples with its ratios to other rows and the goals it is held to; the
//! table they print ([`table`], columns chosen by the bench) and the row's
//! form in their JSON records ([`RowRecord`]).

use std::fmt::Write as _;

use serde::Serialize;

use super::{
    Target, round, rounded,
    stats::{max_of, median, min_of, percentile},
};

/// One row's median over another's: `of` over `over` (row ids).
pub struct Ratio {
    pub of: String,
    pub over: String,
    pub value: f64,
}

/// One measurement: its samples and what is reported about them.
pub struct Row {
    pub id: String,
    pub name: String,
    pub unit: &'static str,
    pub samples: Vec<f64>,
    /// Whether the 99th percentile is reported.
    pub p99: bool,
    /// The process's CPU use over the samples, in percent of a core.
    pub cpu_percent: Option<f64>,
    /// The process's CPU time of each sample.
    pub cpu_us: Vec<f64>,
    pub ratios: Vec<Ratio>,
    pub targets: Vec<Target>,
}

impl Row {
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        unit: &'static str,
        samples: Vec<f64>,
    ) -> Row {
        Row {
            id: id.into(),
            name: name.into(),
            unit,
            samples,
            p99: false,
            cpu_percent: None,
            cpu_us: Vec::new(),
            ratios: Vec::new(),
            targets: Vec::new(),
        }
    }

    pub fn median(&self) -> f64 {
        median(&self.samples)
    }

    pub fn with_p99(mut self) -> Row {
        self.p99 = true;
        self
    }

    pub fn with_cpu(mut self, percent: Option<f64>, cpu_us: Vec<f64>) -> Row {
        self.cpu_percent = percent;
        self.cpu_us = cpu_us;
        self
    }

    /// This row's median over row `over`'s.
    pub fn ratio_to(mut self, over: &str, over_median: f64) -> Row {
        self.ratios.push(Ratio {
            of: self.id.clone(),
            over: over.to_string(),
            value: self.median() / over_median,
        });
        self
    }

    /// Row `of`'s median over this row's: how many times faster `of` is.
    pub fn speedup_of(mut self, of: &str, of_median: f64) -> Row {
        self.ratios.push(Ratio {
            of: of.to_string(),
            over: self.id.clone(),
            value: of_median / self.median(),
        });
        self
    }

    pub fn target(mut self, text: &'static str, met: bool) -> Row {
        self.targets.push(Target { text, met });
        self
    }
}

/// A column of [`table`] between the measurement's name and its targets.
pub struct Column {
    heading: &'static str,
    width: usize,
    cell: fn(&Row) -> String,
}

impl Column {
    pub fn median(width: usize) -> Column {
        Column {
            heading: "median",
            width,
            cell: |r| value(r, r.median()),
        }
    }

    pub fn min(width: usize) -> Column {
        Column {
            heading: "min",
            width,
            cell: |r| value(r, min_of(&r.samples)),
        }
    }

    pub fn max(width: usize) -> Column {
        Column {
            heading: "max",
            width,
            cell: |r| value(r, max_of(&r.samples)),
        }
    }

    /// The 99th percentile, for the rows that report it.
    pub fn p99(width: usize) -> Column {
        Column {
            heading: "p99",
            width,
            cell: |r| {
                if r.p99 {
                    value(r, percentile(&r.samples, 99.0))
                } else {
                    "-".into()
                }
            },
        }
    }

    pub fn cpu_percent(width: usize) -> Column {
        Column {
            heading: "CPU %",
            width,
            cell: |r| r.cpu_percent.map_or("-".into(), |c| format!("{c:.1}")),
        }
    }

    /// The row's first ratio.
    pub fn ratio(width: usize) -> Column {
        Column {
            heading: "ratio",
            width,
            cell: |r| {
                r.ratios
                    .first()
                    .map_or("-".into(), |q| format!("{:.2}x", q.value))
            },
        }
    }
}

fn value(r: &Row, x: f64) -> String {
    format!("{x:.2} {}", r.unit)
}

/// The printed table: a line per row, its name, `columns`, and its targets
/// with whether each was met; then `footer`.
pub fn table(rows: &[Row], columns: &[Column], footer: &str) -> String {
    let name_width = rows.iter().map(|r| r.name.len()).max().unwrap_or(0);
    let mut out = format!("{:<name_width$}", "measurement");
    for c in columns {
        let _ = write!(out, "  {:>w$}", c.heading, w = c.width);
    }
    out.push_str("  target (met?)\n");
    for r in rows {
        let mut line = format!("{:<name_width$}", r.name);
        for c in columns {
            let _ = write!(line, "  {:>w$}", (c.cell)(r), w = c.width);
        }
        let targets: Vec<String> = r
            .targets
            .iter()
            .map(|t| format!("{} ({})", t.text, if t.met { "met" } else { "MISSED" }))
            .collect();
        let _ = writeln!(
            out,
            "{}",
            format!("{line}  {}", targets.join(", ")).trim_end()
        );
    }
    out.push_str(footer);
    out
}

/// What a record says of a row beside its median, targets and samples.
#[derive(Clone, Copy)]
pub enum RowFields {
    /// The 99th percentile where the row reports it, the CPU use, and its
    /// one ratio with the row it is to (`ratio`, `ratio_to`): guest_overhead.
    Latency,
    /// The extremes and every ratio (`ratios`, each `{of, over, value}`):
    /// wasm_kernels.
    Range,
}

/// One row in a record; numbers to 4 decimals, a non-finite one `null`.
#[derive(Serialize)]
pub struct RowRecord<'a> {
    id: &'a str,
    name: &'a str,
    unit: &'static str,
    median: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    min: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    p99: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_percent: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio_to: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ratios: Vec<RatioRecord<'a>>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    targets: &'a [Target],
    samples: Vec<f64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    cpu_us: Vec<f64>,
}

/// A [`Ratio`] in a record.
#[derive(Serialize)]
struct RatioRecord<'a> {
    of: &'a str,
    over: &'a str,
    value: f64,
}

impl<'a> RowRecord<'a> {
    pub fn new(r: &'a Row, fields: RowFields) -> RowRecord<'a> {
        let four = |x: f64| round(x, 4);
        let latency = matches!(fields, RowFields::Latency);
        let range = matches!(fields, RowFields::Range);
        let first = r.ratios.first().filter(|_| latency);
        RowRecord {
            id: &r.id,
            name: &r.name,
            unit: r.unit,
            median: four(r.median()),
            min: range.then(|| four(min_of(&r.samples))),
            max: range.then(|| four(max_of(&r.samples))),
            p99: (latency && r.p99).then(|| four(percentile(&r.samples, 99.0))),
            cpu_percent: r.cpu_percent.filter(|_| latency).map(four),
            ratio: first.map(|q| four(q.value)),
            ratio_to: first.map(|q| q.over.as_str()),
            ratios: if range {
                r.ratios
                    .iter()
                    .map(|q| RatioRecord {
                        of: &q.of,
                        over: &q.over,
                        value: four(q.value),
                    })
                    .collect()
            } else {
                Vec::new()
            },
            targets: &r.targets,
            samples: rounded(&r.samples, 4),
            cpu_us: if latency {
                rounded(&r.cpu_us, 4)
            } else {
                Vec::new()
            },
        }
    }
}
