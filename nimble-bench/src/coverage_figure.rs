//! The coverage figure: one row per model, Nimble's and the one-stream graph's speedup over
//! eager as horizontal bars (the fastest first), and the models that did not run at the bottom
//! with the class of their error.

use anyhow::Result;
use experiments::coverage::{CoverageRecord, ModelOutcome};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::plots::Drawing;

const ROW: u32 = 18;
const NIMBLE: RGBColor = RGBColor(25, 118, 210);
const ONE_STREAM: RGBColor = RGBColor(176, 190, 197);
const FAILED: RGBColor = RGBColor(211, 47, 47);

pub struct CoverageFigure<'a> {
    rows: Vec<&'a ModelOutcome>,
    title: String,
    notes: Vec<String>,
    top: f64,
}

impl<'a> CoverageFigure<'a> {
    pub fn new(record: &'a CoverageRecord) -> Result<Self> {
        anyhow::ensure!(!record.models.is_empty(), "the coverage record has no models");
        let mut rows: Vec<&ModelOutcome> = record.models.iter().collect();
        // Fastest first; the models that did not run last, by status.
        rows.sort_by(|a, b| match (a.speedup_over_eager(), b.speedup_over_eager()) {
            (Some(x), Some(y)) => y.total_cmp(&x),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => a.status.cmp(&b.status).then(a.name.cmp(&b.name)),
        });
        let top = rows.iter().filter_map(|m| m.speedup_over_eager()).fold(2.0, f64::max) * 1.1; // the legend sits at the lower right, by the slowest models
        let s = &record.summary;
        let title = format!(
            "Coverage: {} of {} models prepared and matched eager; Nimble {:.2}x over eager (geometric mean)",
            s.ok, s.population, s.geomean_speedup_over_eager
        );
        let mut notes: Vec<String> = record
            .parts
            .iter()
            .map(|p| {
                let v = &p.provenance;
                format!(
                    "Measured: {} (driver {}), libtorch {}, {}, commit {}; exported by PyTorch {}; median of {} runs.",
                    v.gpu,
                    v.driver_version.as_deref().unwrap_or("?"),
                    p.libtorch,
                    &v.date_utc[..v.date_utc.len().min(10)],
                    &v.commit[..v.commit.len().min(7)],
                    p.exporter["torch"].as_str().unwrap_or("?"),
                    v.iterations
                )
            })
            .collect();
        notes.dedup();
        notes.push("Batch 1, inference rewrites on; in red: the models that did not run, with the class of their error.".into());
        notes.push(format!(
            "Nimble over its own one-stream graph: {:.2}x (geometric mean); prepare: median {:.2} s, slowest {:.2} s ({}).",
            s.geomean_speedup_over_one_stream, s.prepare_median_s, s.prepare_max_s, s.prepare_max_model
        ));
        Ok(CoverageFigure { rows, title, notes, top })
    }
}

impl Drawing for CoverageFigure<'_> {
    fn size(&self) -> (u32, u32) {
        (1000, 160 + ROW * self.rows.len() as u32 + 24 * self.notes.len() as u32)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let n = self.rows.len();
        root.fill(&WHITE)?;
        let (plot, notes_area) = root.split_vertically(120 + ROW * n as u32);
        let mut chart = ChartBuilder::on(&plot)
            .caption(&self.title, ("sans-serif", 17))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(170)
            .build_cartesian_2d(0.0..self.top, 0.0..n as f64)?;
        let rows = &self.rows;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .light_line_style(WHITE)
            .y_labels(2 * n + 1)
            .y_label_formatter(&|y| {
                // Row i spans [n-1-i, n-i): its label sits at the middle.
                let slot = (n as f64 - y - 0.5).round();
                if (n as f64 - y - 0.5 - slot).abs() < 1e-6 && slot >= 0.0 && (slot as usize) < n {
                    let m = rows[slot as usize];
                    match m.optimized.as_ref() {
                        Some(o) => format!("{} ({})", m.name, o.streams),
                        None => m.name.clone(),
                    }
                } else {
                    String::new()
                }
            })
            .y_label_style(("sans-serif", 11))
            .x_desc("speedup over eager (×); in brackets: Nimble's streams")
            .draw()?;
        let y = |i: usize| (n - 1 - i) as f64;
        let bar = |i: usize, from: f64, to: f64, value: f64, color: RGBColor| Rectangle::new([(0.0, y(i) + from), (value, y(i) + to)], color.filled());
        let ran: Vec<(usize, &ModelOutcome)> = rows.iter().copied().enumerate().filter(|(_, m)| m.speedup_over_eager().is_some()).collect();
        chart
            .draw_series(ran.iter().map(|&(i, m)| bar(i, 0.15, 0.85, m.speedup_over_eager().unwrap_or(0.0), NIMBLE)))?
            .label("Nimble (multi-stream CUDA graph)")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], NIMBLE.filled()));
        chart
            .draw_series(ran.iter().filter_map(|&(i, m)| Some(bar(i, 0.35, 0.65, m.eager_ms? / m.optimized.as_ref()?.graph_ms, ONE_STREAM))))?
            .label("one-stream CUDA graph")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], ONE_STREAM.filled()));
        chart.draw_series(std::iter::once(PathElement::new([(1.0, 0.0), (1.0, n as f64)], BLACK.mix(0.5))))?;
        let failed_style = ("sans-serif", 11).into_font().color(&FAILED);
        for (i, m) in rows.iter().enumerate().filter(|(_, m)| m.speedup_over_eager().is_none()) {
            let why = m.error.as_deref().unwrap_or("");
            let short: String = why.chars().take(110).collect();
            chart.draw_series(std::iter::once(Text::new(format!("{}: {short}", m.status.name()), (0.05, y(i) + 0.8), failed_style.clone())))?;
        }
        chart.configure_series_labels().background_style(WHITE.mix(0.9)).border_style(BLACK).position(SeriesLabelPosition::LowerRight).draw()?;
        let style = ("sans-serif", 13).into_font().color(&BLACK.mix(0.8));
        for (i, note) in self.notes.iter().enumerate() {
            notes_area.draw(&Text::new(note.clone(), (20, 8 + 22 * i as i32), style.clone()))?;
        }
        Ok(())
    }
}
