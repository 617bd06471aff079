//! `infer`'s last pass: each Nimble row's floor (the critical path of its kernel-timed task
//! graph, which no stream assignment can beat) and the latency over it.

use std::path::Path;

use anyhow::{Context, Result};
use experiments::floor;
use experiments::inference::{InferConfig, InferMode, InferRow};
use tch::Device;

use crate::output::{note, progress, write_file};
use crate::torch::{for_each_model, Models};

/// Fills `floor` in every Nimble row of `rows`, model by model, and writes each kernel-timed
/// graph to `graphs` (`MODEL.graph.json`, `MODEL.raw.graph.json` without the rewrites) when
/// given. The profiler it loads stays in the process and slows later launches, so this runs
/// after every measurement.
pub(crate) fn add_floors(models: Models<'_>, config: &InferConfig, rows: &mut [InferRow], graphs: Option<&Path>) -> Result<()> {
    if let Some(dir) = graphs {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let count = rows.iter().filter(|r| r.mode == InferMode::Nimble).count();
    let bar = progress(count, "floor");
    for_each_model(models, Device::Cuda(0), |name| bar.set_message(name.to_string()), |model| {
        for row in rows.iter_mut().filter(|r| r.mode == InferMode::Nimble && r.model == model.name()) {
            let (floor, graph) = floor::measure_floor(model, config, row).with_context(|| format!("timing {}'s kernels for its floor", row.model))?;
            note(
                &bar,
                &format!(
                    "  {:<16} floor {:>8.1} us over {} of {} tasks (kernel time {:.1} us); Nimble {:.1} us = {:.2}x the floor",
                    row.model, floor.floor_us, floor.path_tasks, floor.tasks, floor.kernel_time_us, row.latency.median_us, floor.over_floor
                ),
            );
            if let Some(dir) = graphs {
                let file = format!("{}{}.graph.json", sanitize(&row.model), if row.optimized { "" } else { ".raw" });
                write_file(&dir.join(file), &graph.to_json_string())?;
            }
            row.floor = Some(floor);
            bar.inc(1);
        }
        Ok(())
    })?;
    bar.finish_and_clear();
    Ok(())
}

/// A model name as a file name: TorchScript models are named by their path.
fn sanitize(name: &str) -> String {
    let stem = Path::new(name).file_stem().and_then(|s| s.to_str()).unwrap_or(name);
    stem.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' { c } else { '_' }).collect()
}

#[cfg(test)]
mod tests {
    use super::sanitize;

    #[test]
    fn file_names_come_from_model_names_and_paths() {
        assert_eq!(sanitize("nasnet-a-mobile"), "nasnet-a-mobile");
        assert_eq!(sanitize("/models/bert base.pt"), "bert_base");
    }
}
