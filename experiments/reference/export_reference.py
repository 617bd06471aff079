"""Export reference PyTorch models' weights, an input and the output they give, for the zoo's
parity test (`experiments/tests/zoo.rs`, run with NIMBLE_REFERENCE_DIR=<out dir>).

Each model becomes <out>/<name>.safetensors holding its state_dict (batch-norm statistics set
to random values first, so that they matter) plus `__input__` and `__output__` (evaluation
mode, float32, CPU). The Rust model loads the same file by variable name and must reproduce
the output.

Needs torch, torchvision, safetensors, and for the NASNets the `pretrainedmodels` package.
DARTS and AmoebaNet come from the DARTS authors' repository, which is not a package: they are
checked by parameter and operator counts only.

    python3 experiments/reference/export_reference.py OUT_DIR [MODEL ...]
"""

import sys
from pathlib import Path

import torch


def reference(name):
    """The reference model and its input resolution, or None when its package is missing."""
    import torchvision.models as tv

    torchvision_models = {
        "resnet50": (lambda: tv.resnet50(), 224),
        "resnet101": (lambda: tv.resnet101(), 224),
        "inception-v3": (lambda: tv.inception_v3(aux_logits=True, init_weights=True), 299),
        "mobilenet-v2": (lambda: tv.mobilenet_v2(), 224),
        "efficientnet-b0": (lambda: tv.efficientnet_b0(), 224),
        "efficientnet-b5": (lambda: tv.efficientnet_b5(), 456),
    }
    if name in torchvision_models:
        build, resolution = torchvision_models[name]
        return build(), resolution
    if name in ("nasnet-a-large", "nasnet-a-mobile"):
        try:
            import pretrainedmodels
        except ImportError:
            return None
        if name == "nasnet-a-large":
            return pretrainedmodels.nasnetalarge(num_classes=1000, pretrained=None), 331
        return pretrainedmodels.nasnetamobile(num_classes=1000, pretrained=None), 224
    return None


def export(name, out_dir):
    made = reference(name)
    if made is None:
        print(f"{name}: no reference package here, skipped")
        return
    model, resolution = made
    torch.manual_seed(0)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.1, 0.1)
    model.eval()
    x = torch.randn(1, 3, resolution, resolution)
    with torch.no_grad():
        y = model(x)
    tensors = {k: v.contiguous() for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    tensors["__input__"] = x
    tensors["__output__"] = y
    from safetensors.torch import save_file

    path = Path(out_dir) / f"{name}.safetensors"
    save_file(tensors, str(path))
    params = sum(p.numel() for p in model.parameters())
    print(f"{name}: {params} parameters, output {tuple(y.shape)} -> {path}")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out_dir = Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    names = sys.argv[2:] or [
        "resnet50", "resnet101", "inception-v3", "mobilenet-v2", "efficientnet-b0",
        "efficientnet-b5", "nasnet-a-large", "nasnet-a-mobile",
    ]
    torch.set_grad_enabled(False)
    for name in names:
        export(name, out_dir)


if __name__ == "__main__":
    main()
