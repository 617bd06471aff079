"""The models every comparison builds, as the records build them: the zoo's (through its
PyTorch reference definitions), the coverage set's GoogLeNet, Inception-v4 and BERT-base, and the
Llama-, Qwen2- and Mistral-style decoders; their inputs at a batch and dtype, BatchNorm statistics
calibrated on random inputs, and the compilers warmed up before the first model is timed. Shared
by same_process.py, kernel_graphs.py, backend_compile_profile.py and the probes."""

import argparse
import time

import torch
from torch._inductor.utils import fresh_cache

from baselines import build

COVERAGE_MODELS = ["googlenet", "inception-v4", "bert-base"]


DECODERS = ["llama", "qwen2", "mistral"]


def decoder(name, batch):
    """A decoder-only language model from its transformers configuration: 8 layers, hidden 1024,
    16 heads (4 key-value heads), 128 tokens, random weights, no cache, tuples out."""
    import transformers

    common = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4, vocab_size=32000, use_cache=False, return_dict=False)
    config_class, model_class = {
        "llama": (transformers.LlamaConfig, transformers.LlamaModel),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2Model),
        "mistral": (transformers.MistralConfig, transformers.MistralModel),
    }[name]
    model = model_class(config_class(**common))
    return model, lambda: torch.randint(0, common["vocab_size"], (batch, 128), device="cuda")


def coverage_model(name):
    """(module, make_input) for a model of the coverage set."""
    if name == "googlenet":
        import torchvision

        model = torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=True)
        return model, lambda: torch.randn(1, 3, 224, 224, device="cuda")
    if name == "inception-v4":
        import timm

        return timm.create_model("inception_v4", pretrained=False), lambda: torch.randn(1, 3, 299, 299, device="cuda")
    if name == "bert-base":
        from transformers import BertConfig, BertModel

        # Tuples, not ModelOutput (transformers 5 no longer reads `torchscript`), and no cache.
        model = BertModel(BertConfig(torchscript=True, return_dict=False, use_cache=False))
        vocabulary = model.config.vocab_size
        return model, lambda: torch.randint(0, vocabulary, (1, 128), device="cuda")
    raise SystemExit(f"unknown model {name!r}")


def probe_parser(doc):
    """The arguments of a probe over some of these models (`model_and_inputs`): --models-json,
    --models (comma-separated), --batch (16 by default) and --dtype."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--models-json", required=True, help="nimble-bench models --json output")
    parser.add_argument("--models", required=True)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--dtype", default="float32")
    return parser


def model_and_inputs(name, zoo, reference, batch, dtype, skipped):
    """(model, make_input) for a model of the zoo (`nimble-bench models --json`, by name), the
    decoders or the coverage set, its inputs at `batch` and, if floating, in `dtype`, on the GPU;
    None when no package here provides it (the reason then added to `skipped`). The models as the
    records build them; `backend_overhead.model_and_input` builds a few without the zoo's
    manifest, for the profiles that run without one."""
    if name in zoo:
        model = build(name, reference, skipped)
        if model is None:
            return None
        shape = [batch] + zoo[name]["input_shape"]
        return model, lambda: torch.randn(shape, device="cuda", dtype=dtype)
    if name in DECODERS:
        return decoder(name, batch)
    model, one = coverage_model(name)
    return model, lambda: batched(one(), batch, dtype)


def record_model(name, zoo, reference, batch, dtype, skipped):
    """``model_and_inputs`` as the records run it: the model on the GPU, its BatchNorm
    statistics ``calibrated`` (seeded), in inference mode and in ``dtype``; None where no package
    here provides it."""
    made = model_and_inputs(name, zoo, reference, batch, dtype, skipped)
    if made is None:
        return None
    model, make_input = made
    torch.manual_seed(0)
    return calibrated(model.cuda(), make_input).eval().to(dtype), make_input


def batched(x, batch, dtype):
    """A batch-1 input of the coverage set at `batch` and, if floating, in `dtype`."""
    x = x.to(dtype) if x.is_floating_point() else x
    return x.repeat(batch, *[1] * (x.dim() - 1)) if batch != 1 else x


def calibrated(model, make_input, batches=2):
    """`model` with its BatchNorm layers' running statistics measured on random inputs (batches
    of four, in float32, cumulative averages) instead of their initial zeros and ones. At random
    initialization with those, GoogLeNet's and Inception-v4's activations shrink layer by layer
    until the output no longer depends on the input (every system then "matches" eager exactly,
    as the records before this one show); measured statistics keep each layer's activations at
    unit scale, as trained ones do, so the output check means something."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    if not norms:
        return model
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        for _ in range(batches):
            x = torch.cat([make_input() for _ in range(4)])
            model(x.float() if x.is_floating_point() else x)
    for m, momentum in zip(norms, momenta):
        m.momentum = momentum
    return model


def warm_up_compilers(systems, dtype, variants=None):
    """A small model compiled by each compiling system, before any model of the record: the
    process's one-time costs (Inductor's and Triton's imports, its compile workers' start) would
    otherwise fall on whichever system compiles first, reduce-overhead, and lower the others'
    compile times against it (at e36a9ad the first model's reduce-overhead took 11.4-17.0 s on
    decoders whose later ones took 5.9-7.4)."""
    torch.manual_seed(0)
    small = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 16), torch.nn.LayerNorm(16)
    ).cuda().eval().to(dtype)
    x = torch.randn(2, 3, 8, 8, device="cuda", dtype=dtype)
    started = time.time()
    for system in systems:
        if system == "compile" or system.startswith("compile-"):
            run = torch.compile(small, mode="reduce-overhead")
        elif system == "max-autotune":
            run = torch.compile(small, mode="max-autotune")
        elif system == "backend" or (system in (variants or {})):
            run = torch.compile(small, backend="nimble")
        else:
            continue
        with fresh_cache(delete=False), torch.no_grad():
            for _ in range(3):
                run(x)
    torch.cuda.synchronize()
    return time.time() - started
