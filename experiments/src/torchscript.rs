//! Any TorchScript file as a subject of the inference experiments: the file, one input
//! specification per forward argument (`1x3x224x224`, `1x128:int64:0:30000`), and the
//! module's own eager forward as the reference.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use nimble_torch::Nimble;
use tch::{Device, Kind, Tensor};

use crate::inference::Subject;

/// One forward argument: its shape, dtype and the range random values are drawn from.
#[derive(Clone, Debug, PartialEq)]
pub struct InputSpec {
    pub shape: Vec<i64>,
    pub kind: Kind,
    /// `[low, high)`: uniform floats, or integers in it. `None`: standard-normal floats,
    /// integers 0 or 1, booleans true or false.
    pub range: Option<(f64, f64)>,
}

/// The dtype names `--input` takes.
const KINDS: &[(&str, Kind)] = &[
    ("float32", Kind::Float),
    ("float", Kind::Float),
    ("float16", Kind::Half),
    ("half", Kind::Half),
    ("bfloat16", Kind::BFloat16),
    ("float64", Kind::Double),
    ("double", Kind::Double),
    ("int64", Kind::Int64),
    ("long", Kind::Int64),
    ("int32", Kind::Int),
    ("int", Kind::Int),
    ("int16", Kind::Int16),
    ("int8", Kind::Int8),
    ("uint8", Kind::Uint8),
    ("bool", Kind::Bool),
];

/// The `--input` name of `kind`.
pub fn kind_name(kind: Kind) -> &'static str {
    KINDS.iter().find(|(_, k)| *k == kind).map_or("?", |(name, _)| name)
}

/// A dtype by its `--input` name.
pub fn parse_kind(name: &str) -> Result<Kind, String> {
    KINDS.iter().find(|(n, _)| *n == name).map(|(_, k)| *k).ok_or_else(|| {
        let names: Vec<&str> = KINDS.iter().map(|(n, _)| *n).collect();
        format!("unknown dtype `{name}`, expected one of {}", names.join(", "))
    })
}

fn is_float(kind: Kind) -> bool {
    matches!(kind, Kind::Float | Kind::Half | Kind::BFloat16 | Kind::Double)
}

impl FromStr for InputSpec {
    type Err = String;

    /// `SHAPE[:DTYPE[:LOW:HIGH]]`, the shape as dimensions joined by `x` (`1x3x224x224`; `scalar`
    /// for a 0-dimensional tensor).
    fn from_str(text: &str) -> Result<InputSpec, String> {
        let bad = |why: String| format!("--input `{text}`: {why} (expected SHAPE[:DTYPE[:LOW:HIGH]], e.g. 1x3x224x224 or 1x128:int64:0:30000)");
        let fields: Vec<&str> = text.split(':').collect();
        if !matches!(fields.len(), 1 | 2 | 4) {
            return Err(bad(format!("{} fields separated by `:`", fields.len())));
        }
        let shape = if fields[0] == "scalar" {
            Vec::new()
        } else {
            fields[0]
                .split('x')
                .map(|d| match d.parse::<i64>() {
                    Ok(n) if n >= 1 => Ok(n),
                    _ => Err(bad(format!("dimension `{d}` is not a positive integer"))),
                })
                .collect::<Result<Vec<_>, _>>()?
        };
        let elements = shape.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d)).filter(|&n| n <= MAX_ELEMENTS);
        if elements.is_none() {
            return Err(bad(format!("more than {MAX_ELEMENTS} elements")));
        }
        let kind = match fields.get(1) {
            Some(name) => parse_kind(name).map_err(bad)?,
            None => Kind::Float,
        };
        let range = if fields.len() == 4 {
            let number = |s: &str| s.parse::<f64>().ok().filter(|x| x.is_finite()).ok_or_else(|| bad(format!("`{s}` is not a finite number")));
            let (low, high) = (number(fields[2])?, number(fields[3])?);
            if low >= high {
                return Err(bad(format!("LOW {low} is not below HIGH {high}")));
            }
            if kind == Kind::Bool {
                return Err(bad("bool inputs take no range".into()));
            }
            if !is_float(kind) && (low.fract() != 0.0 || high.fract() != 0.0) {
                return Err(bad(format!("an integer dtype's range needs integer bounds, got {low} and {high}")));
            }
            Some((low, high))
        } else {
            None
        };
        Ok(InputSpec { shape, kind, range })
    }
}

/// The largest input `--input` accepts (2^31 elements, 8 GiB of float32).
const MAX_ELEMENTS: i64 = 1 << 31;

impl fmt::Display for InputSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shape = if self.shape.is_empty() { "scalar".to_string() } else { self.shape.iter().map(i64::to_string).collect::<Vec<_>>().join("x") };
        write!(f, "{shape}:{}", kind_name(self.kind))?;
        if let Some((low, high)) = self.range {
            write!(f, ":{low}:{high}")?;
        }
        Ok(())
    }
}

impl InputSpec {
    /// A fresh random tensor of this specification on `device`.
    pub fn sample(&self, device: Device) -> Tensor {
        let shape = self.shape.as_slice();
        match (self.kind, self.range) {
            (Kind::Bool, _) => Tensor::rand(shape, (Kind::Float, device)).lt(0.5),
            (kind, None) if is_float(kind) => Tensor::randn(shape, (kind, device)),
            (kind, Some((low, high))) if is_float(kind) => Tensor::rand(shape, (kind, device)) * (high - low) + low,
            (kind, range) => {
                let (low, high) = range.unwrap_or((0.0, 2.0));
                Tensor::randint_low(low as i64, high as i64, shape, (kind, device))
            }
        }
    }
}

/// A TorchScript file and its inputs, on a device.
pub struct TorchScriptModel {
    pub name: String,
    pub path: PathBuf,
    pub inputs: Vec<InputSpec>,
    pub device: Device,
    /// The dtype the module's floating-point parameters and float inputs are converted to.
    pub dtype: Option<Kind>,
    /// The module itself, run eagerly (op by op, no graph): the reference.
    reference: Nimble,
}

/// Why `path` cannot be a TorchScript file, if it cannot: it does not exist, cannot be read, or
/// is a directory, a device or a FIFO rather than a regular file.
pub fn check_file(path: &Path) -> Result<(), String> {
    let expected = "expected a TorchScript file (torch.jit.save)";
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!("--torchscript {}: no such file", path.display())),
        Err(e) => Err(format!("--torchscript {}: {e}", path.display())),
        Ok(m) if m.is_dir() => Err(format!("--torchscript {}: a directory; {expected}", path.display())),
        Ok(m) if !m.is_file() => Err(format!("--torchscript {}: not a regular file (a device or a FIFO); {expected}", path.display())),
        Ok(_) => Ok(()),
    }
}

impl TorchScriptModel {
    /// Loads `path` onto `device` and checks `inputs` against its forward: their number
    /// against its arguments, their shapes and dtypes by running it once. With `dtype`, the
    /// module's floating-point parameters and buffers and the float inputs are converted to it.
    pub fn load(path: &Path, inputs: Vec<InputSpec>, device: Device, dtype: Option<Kind>) -> Result<TorchScriptModel, String> {
        check_file(path)?;
        let mut reference = Nimble::from_torchscript(path, device).map_err(|e| format!("loading {} as TorchScript: {e}", path.display()))?;
        if let Some(kind) = dtype {
            reference.to_kind(kind).map_err(|e| e.to_string())?;
        }
        let arguments = reference.torchscript_arguments().map_err(|e| e.to_string())?.unwrap_or_default();
        let required = arguments.iter().filter(|(_, _, default)| !default).count();
        if inputs.len() < required || inputs.len() > arguments.len() {
            let listed: Vec<String> = arguments.iter().map(|(name, ty, default)| format!("{name}: {ty}{}", if *default { " (optional)" } else { "" })).collect();
            return Err(format!(
                "{}'s forward takes {} input{} ({}), got {} --input",
                path.display(),
                if required == arguments.len() { arguments.len().to_string() } else { format!("{required} to {}", arguments.len()) },
                if arguments.len() == 1 { "" } else { "s" },
                listed.join(", "),
                inputs.len()
            ));
        }
        let inputs = match dtype {
            Some(kind) => inputs.into_iter().map(|s| if is_float(s.kind) { InputSpec { kind, ..s } } else { s }).collect(),
            None => inputs,
        };
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("torchscript").to_string();
        let model = TorchScriptModel { name, path: path.to_path_buf(), inputs, device, dtype, reference };
        let given: Vec<String> = model.inputs.iter().map(InputSpec::to_string).collect();
        model.reference.eager(&model.sample()).map_err(|e| format!("{}'s forward failed on the --input tensors ({}): {e}", path.display(), given.join(", ")))?;
        Ok(model)
    }

    /// Fresh random inputs.
    pub fn sample(&self) -> Vec<Tensor> {
        self.inputs.iter().map(|spec| spec.sample(self.device)).collect()
    }
}

impl Subject for TorchScriptModel {
    fn name(&self) -> &str {
        &self.name
    }

    fn inputs(&self, _batch: i64) -> Vec<Tensor> {
        self.sample()
    }

    fn nimble(&self) -> nimble_torch::Result<Nimble> {
        let mut nimble = Nimble::from_torchscript(&self.path, self.device)?;
        if let Some(kind) = self.dtype {
            nimble.to_kind(kind)?;
        }
        Ok(nimble)
    }

    fn eager(&self, inputs: &[Tensor]) -> nimble_torch::Result<Vec<Tensor>> {
        self.reference.eager(inputs)
    }

    fn kind(&self) -> Kind {
        self.dtype.unwrap_or(Kind::Float)
    }

    fn script_module(&self, _batch: i64) -> nimble_torch::Result<tch::CModule> {
        let mut module = tch::CModule::load_on_device(&self.path, self.device).map_err(|e| nimble_torch::NimbleError::Torch { call: "CModule::load", message: e.to_string() })?;
        if let Some(kind) = self.dtype {
            module.to(self.device, kind, false);
        }
        module.set_eval();
        Ok(module)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_specifications_parse_and_print() {
        let cases = [
            ("1x3x224x224", vec![1, 3, 224, 224], Kind::Float, None),
            ("1x128:int64:0:30000", vec![1, 128], Kind::Int64, Some((0.0, 30000.0))),
            ("2x5:bool", vec![2, 5], Kind::Bool, None),
            ("4:bfloat16:-1:1", vec![4], Kind::BFloat16, Some((-1.0, 1.0))),
            ("scalar:int32", vec![], Kind::Int, None),
        ];
        for (text, shape, kind, range) in cases {
            let spec: InputSpec = text.parse().unwrap();
            assert_eq!(spec, InputSpec { shape, kind, range }, "{text}");
            assert_eq!(spec.to_string().parse::<InputSpec>().unwrap(), spec, "{text} round trip");
            let t = spec.sample(Device::Cpu);
            assert_eq!((t.size(), t.kind()), (spec.shape.clone(), spec.kind), "{text}");
        }
        let ids = "1000:int64:5:9".parse::<InputSpec>().unwrap().sample(Device::Cpu);
        assert!(ids.min().int64_value(&[]) >= 5 && ids.max().int64_value(&[]) < 9);
    }

    #[test]
    fn bad_input_specifications_say_what_was_expected() {
        for (text, says) in [
            ("", "dimension"),
            ("1x0x3", "dimension `0`"),
            ("1x3:float33", "unknown dtype `float33`"),
            ("1x3:int64:5", "3 fields"),
            ("1x3:int64:9:5", "not below"),
            ("1x3:int64:0.5:4", "integer bounds"),
            ("1x3:float:0:inf", "finite"),
            ("1x3:bool:0:1", "no range"),
            ("65536x65536x2", "elements"),
        ] {
            let error = text.parse::<InputSpec>().unwrap_err();
            assert!(error.contains(says) && error.contains("expected SHAPE"), "{text}: {error}");
        }
    }
}
