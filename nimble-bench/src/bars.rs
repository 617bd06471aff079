//! Grouped bar charts (the paper's figure style): one group per model, one bar per series, a
//! legend and notes under the plot.

use std::path::Path;

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::plots::{save, Drawing};

/// Colours for series that have no colour of their own (e.g. one per algorithm).
pub const PALETTE: [RGBColor; 7] =
    [RGBColor(25, 118, 210), RGBColor(100, 181, 246), RGBColor(120, 144, 156), RGBColor(255, 152, 0), RGBColor(76, 175, 80), RGBColor(156, 39, 176), RGBColor(244, 67, 54)];

/// One group of bars: its label and one value per series.
pub struct Group {
    pub label: String,
    pub values: Vec<f64>,
}

/// A grouped bar chart of speedups over eager, with a legend and notes under it.
struct GroupedBars<'a> {
    title: &'a str,
    y_desc: &'a str,
    groups: &'a [Group],
    series: &'a [(&'a str, RGBColor)],
    notes: &'a [String],
    /// Per group and series, a band (low, high) drawn as an error bar over the bar.
    bands: Option<&'a [Vec<(f64, f64)>]>,
}

impl Drawing for GroupedBars<'_> {
    fn size(&self) -> (u32, u32) {
        // Wide enough for the group labels under their bars.
        // Tall enough for every note (22 px each) under the 500 px plot.
        ((130 * self.groups.len() as u32).max(1000), (516 + 22 * self.notes.len() as u32).max(560))
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let groups = self.groups;
        // Headroom above the bars for the legend.
        let highest = groups.iter().flat_map(|g| g.values.iter().copied()).chain(self.bands.into_iter().flatten().flatten().map(|b| b.1));
        let top = highest.fold(1.0, f64::max) * (1.25 + 0.07 * self.series.len() as f64);
        let n = groups.len() as f64;
        let width = 0.8 / self.series.len() as f64;
        root.fill(&WHITE)?;
        let (plot, notes_area) = root.split_vertically(500);
        let mut chart = ChartBuilder::on(&plot)
            .caption(self.title, ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..n, 0.0..top)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(groups.len() * 2 + 1)
            .x_label_formatter(&|x| {
                let i = x.floor() as usize;
                if (x - i as f64 - 0.5).abs() < 1e-6 && i < groups.len() {
                    groups[i].label.clone()
                } else {
                    String::new()
                }
            })
            .y_desc(self.y_desc)
            .draw()?;
        for (k, &(label, color)) in self.series.iter().enumerate() {
            let offset = 0.1 + k as f64 * width;
            let rects = groups.iter().enumerate().map(|(i, g)| Rectangle::new([(i as f64 + offset, 0.0), (i as f64 + offset + width * 0.9, g.values[k])], color.filled()));
            chart.draw_series(rects)?.label(label).legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
            if let Some(bands) = self.bands {
                for (i, (low, high)) in bands.iter().enumerate().filter_map(|(i, b)| b.get(k).map(|&band| (i, band))) {
                    let x = i as f64 + offset + width * 0.45;
                    let cap = width * 0.2;
                    let lines = [vec![(x, low), (x, high)], vec![(x - cap, low), (x + cap, low)], vec![(x - cap, high), (x + cap, high)]];
                    chart.draw_series(lines.into_iter().map(|points| PathElement::new(points, BLACK.stroke_width(1))))?;
                }
            }
        }
        chart.configure_series_labels().background_style(WHITE.mix(0.9)).border_style(BLACK).position(SeriesLabelPosition::UpperLeft).draw()?;
        let style = ("sans-serif", 13).into_font().color(&BLACK.mix(0.8));
        for (i, note) in self.notes.iter().enumerate() {
            notes_area.draw(&Text::new(note.clone(), (20, 10 + 22 * i as i32), style.clone()))?;
        }
        Ok(())
    }
}

/// Draws a grouped bar chart as SVG and PNG.
pub fn draw_grouped(path: &Path, (title, y_desc): (&str, &str), groups: &[Group], series: &[(&str, RGBColor)], notes: &[String]) -> Result<()> {
    save(&GroupedBars { title, y_desc, groups, series, notes, bands: None }, path)?;
    Ok(())
}

/// The same with a band per group and series (an error bar from `low` to `high`).
pub fn draw_grouped_with_bands(path: &Path, (title, y_desc): (&str, &str), groups: &[Group], series: &[(&str, RGBColor)], notes: &[String], bands: &[Vec<(f64, f64)>]) -> Result<()> {
    save(&GroupedBars { title, y_desc, groups, series, notes, bands: Some(bands) }, path)?;
    Ok(())
}
