//! Figures drawn with plotters' SVG backend (no system fonts needed).

use std::path::Path;

use anyhow::{Context, Result};
use experiments::record::Provenance;
use experiments::simulator_validation::Evaluation;
use nimble_sched::LaunchMode;
use plotters::prelude::*;

/// Log-log scatter of simulated against measured makespan, one color per launch mode, with the
/// diagonal and ±10% lines.
pub fn simulated_vs_measured(path: &Path, evaluation: &Evaluation, provenance: &Provenance) -> Result<()> {
    let values = evaluation.runs.iter().flat_map(|r| [r.measured_us, r.simulated_us]).filter(|v| *v > 0.0);
    let low = values.clone().fold(f64::INFINITY, f64::min) / 1.5;
    let high = values.fold(0.0, f64::max) * 1.5;
    anyhow::ensure!(low.is_finite() && high > low, "nothing to plot");
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (820, 760)).into_drawing_area();
        root.fill(&WHITE)?;
        let title = format!("Simulator vs {} (driver CUDA {}, {})", provenance.gpu, provenance.driver_cuda_version, &provenance.date_utc[..10]);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(64)
            .build_cartesian_2d((low..high).log_scale(), (low..high).log_scale())?;
        chart
            .configure_mesh()
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| format!("{v:.0}"))
            .x_desc("measured makespan (µs, median)")
            .y_desc("simulated makespan (µs)")
            .draw()?;
        for (factor, style) in [(1.0, BLACK.stroke_width(1)), (1.1, BLACK.mix(0.3).stroke_width(1)), (1.0 / 1.1, BLACK.mix(0.3).stroke_width(1))] {
            chart.draw_series(LineSeries::new([(low, low * factor), (high, high * factor)], style))?;
        }
        for (mode, color, label) in [(LaunchMode::Graph, BLUE, "graph launch"), (LaunchMode::Eager, RED, "eager launch")] {
            let points = evaluation.runs.iter().filter(|r| r.mode == mode).map(|r| Circle::new((r.measured_us, r.simulated_us), 3, color.mix(0.6).filled()));
            chart.draw_series(points)?.label(label).legend(move |(x, y)| Circle::new((x, y), 4, color.filled()));
        }
        chart.configure_series_labels().background_style(WHITE.mix(0.9)).border_style(BLACK).position(SeriesLabelPosition::UpperLeft).draw()?;
        root.present()?;
    }
    crate::output::write_file(path, &svg).with_context(|| format!("plotting {}", path.display()))
}
