//! Figures, drawn with plotters once per backend: SVG, and PNG whose text uses the vendored
//! DejaVu Sans (`assets/`), so no system font is needed anywhere.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, Context, Result};
use experiments::record::Provenance;
use experiments::simulator_validation::Evaluation;
use nimble_sched::LaunchMode;
use plotters::coord::Shift;
use plotters::prelude::*;

/// DejaVu Sans (Bitstream Vera license, `assets/DejaVuSans.LICENSE`).
static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// A figure that draws itself on any plotters backend.
pub trait Drawing {
    /// Width and height in pixels.
    fn size(&self) -> (u32, u32);
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static;
}

/// Makes the vendored font plotters' "sans-serif" (once per process).
fn register_font() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_ok());
    ok.then_some(()).ok_or_else(|| anyhow!("the vendored font assets/DejaVuSans.ttf could not be read"))
}

/// Writes `drawing` to `svg` and, beside it, to the same name with `.png`; each rendered in
/// memory and written as every file the CLI writes (`nimble_graph::files::write_atomically`: a
/// temporary file of this process renamed over the target, links followed, FIFOs and devices
/// written directly, modes kept), so an interrupted run leaves no partial figure. Returns the
/// PNG's path.
pub fn save(drawing: &impl Drawing, svg: &Path) -> Result<PathBuf> {
    register_font()?;
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, drawing.size()).into_drawing_area();
        drawing.draw(&root)?;
        root.present()?;
    }
    crate::output::write_file(svg, &text).with_context(|| format!("plotting {}", svg.display()))?;
    let png = svg.with_extension("png");
    let (width, height) = drawing.size();
    let mut pixels = vec![0u8; width as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, (width, height)).into_drawing_area();
        drawing.draw(&root)?;
        root.present().with_context(|| format!("drawing {}", png.display()))?;
    }
    let mut encoded = Vec::new();
    image::ImageEncoder::write_image(image::codecs::png::PngEncoder::new(&mut encoded), &pixels, width, height, image::ColorType::Rgb8)
        .with_context(|| format!("encoding {}", png.display()))?;
    crate::output::write_bytes(&png, &encoded)?;
    Ok(png)
}

/// One scatter series: legend label, color and `(measured, simulated)` points, µs.
pub type Series = (String, RGBColor, Vec<(f64, f64)>);

/// Log-log scatter of simulated against measured makespan, one color per series (launch mode,
/// algorithm), with the diagonal and ±10% lines.
pub struct SimulatedVsMeasured {
    series: Vec<Series>,
    title: String,
    low: f64,
    high: f64,
}

impl SimulatedVsMeasured {
    /// The synthetic suite's runs, one series per launch mode.
    pub fn new(evaluation: &Evaluation, provenance: &Provenance) -> Result<Self> {
        let series = [(LaunchMode::Graph, BLUE, "graph launch"), (LaunchMode::Eager, RED, "eager launch")]
            .into_iter()
            .map(|(mode, color, label)| {
                (label.to_string(), color, evaluation.runs.iter().filter(|r| r.mode == mode).map(|r| (r.measured_us, r.simulated_us)).collect())
            })
            .collect();
        let title = format!("Simulator vs {} (driver CUDA {}, {})", provenance.gpu, provenance.driver_cuda_version, &provenance.date_utc[..10]);
        Self::of_series(title, series)
    }

    /// Any series of `(measured, simulated)` points.
    pub fn of_series(title: String, series: Vec<Series>) -> Result<Self> {
        let values = series.iter().flat_map(|s| s.2.iter().flat_map(|&(m, s)| [m, s])).filter(|v| *v > 0.0);
        let low = values.clone().fold(f64::INFINITY, f64::min) / 1.5;
        let high = values.fold(0.0, f64::max) * 1.5;
        anyhow::ensure!(low.is_finite() && high > low, "nothing to plot");
        Ok(SimulatedVsMeasured { series, title, low, high })
    }
}

impl Drawing for SimulatedVsMeasured {
    fn size(&self) -> (u32, u32) {
        (820, 760)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let (low, high) = (self.low, self.high);
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(root)
            .caption(&self.title, ("sans-serif", 20))
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
        for (label, color, points) in &self.series {
            let color = *color;
            let points = points.iter().map(|&point| Circle::new(point, 3, color.mix(0.6).filled()));
            chart.draw_series(points)?.label(label.as_str()).legend(move |(x, y)| Circle::new((x, y), 4, color.filled()));
        }
        chart.configure_series_labels().background_style(WHITE.mix(0.9)).border_style(BLACK).position(SeriesLabelPosition::UpperLeft).draw()?;
        Ok(())
    }
}
