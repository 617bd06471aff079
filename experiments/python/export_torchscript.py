"""Exports models that no Rust code of ours defines as TorchScript files, for
`nimble-bench infer --torchscript` and `nimble-bench coverage`: every classification model of
torchvision at its default input size, transformers' BERT-base, GPT-2, RoBERTa-base,
DistilBERT, ViT-base and the T5 encoder built from their default configurations, and a sample of
timm's architectures (one per family that torchvision lacks, at its default input size). Random
weights (nothing is downloaded), made informative (see `informative_weights`), evaluation mode,
traced with torch.jit.trace on the device given.

Writes DIR/<name>.pt and DIR/manifest.json: one entry per model with its file, the `--input`
specifications of its forward arguments, where it comes from, and the error when it could not be
exported (the file is then missing).

`--set transformers-families` (not in `all`) exports transformers' decoder-only LMs (at a stated
small size), audio and speech encoders, vision-language vision towers and encoder-decoders with
decoder inputs, each manifest entry with its `family`. `--set torchvision-families` (not in
`all`) exports torchvision's segmentation, video, optical-flow and detection models
(`torchvision.models.list_models(module=...)`), each at the input size its weights' transforms
use (segmentation 520x520; video their crop, 16 frames or the weights' minimum) or a stated one
(optical flow: two 368x496 frames, FlyingChairs' crop; detection: one 320x320 image), the
segmentation models returning their "out" map, RAFT its last flow estimate and the detectors
their first image's boxes, scores and labels.

usage: python export_torchscript.py DIR [--set torchvision|transformers|timm|all|transformers-families|torchvision-families] [--only a,b,...]
                                        [--device cpu|cuda] [--batch N]
"""

import argparse
import contextlib
import importlib.util
import json
import os
import time
import traceback
from pathlib import Path
from typing import List

import torch

# transformers' models: (name, model class, config class, input kind, source)
TRANSFORMERS = [
    ("bert-base", "BertModel", "BertConfig", "ids", "transformers BertModel, BertConfig() (bert-base)"),
    ("gpt2", "GPT2Model", "GPT2Config", "ids", "transformers GPT2Model, GPT2Config() (gpt2, 124M)"),
    ("roberta-base", "RobertaModel", "RobertaConfig", "ids", "transformers RobertaModel, RobertaConfig() (roberta-base)"),
    ("distilbert", "DistilBertModel", "DistilBertConfig", "ids", "transformers DistilBertModel, DistilBertConfig() (distilbert-base)"),
    ("vit-base", "ViTModel", "ViTConfig", "image", "transformers ViTModel, ViTConfig() (vit-base-patch16-224)"),
    ("t5-encoder", "T5EncoderModel", "T5Config", "ids", "transformers T5EncoderModel, T5Config() (t5-small)"),
]
SEQUENCE = 128
# transformers' families beyond classification and encoders (`--set transformers-families`, not
# part of `all`): (name, family, model class, config class, config arguments, forward's keyword
# arguments in order, each "ids:LENGTH" (token ids) or a float tensor's shape without the batch).
# Default configurations where they are a model's base size; decoders at a stated small size.
DECODER = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4, vocab_size=32000)
FAMILIES = [
    ("llama", "decoder", "LlamaModel", "LlamaConfig", DECODER, [("input_ids", "ids:128")]),
    ("qwen2", "decoder", "Qwen2Model", "Qwen2Config", DECODER, [("input_ids", "ids:128")]),
    ("mistral", "decoder", "MistralModel", "MistralConfig", DECODER, [("input_ids", "ids:128")]),
    ("phi3", "decoder", "Phi3Model", "Phi3Config", {**DECODER, "pad_token_id": 0}, [("input_ids", "ids:128")]),
    ("gemma", "decoder", "GemmaModel", "GemmaConfig", {**DECODER, "head_dim": 64}, [("input_ids", "ids:128")]),
    ("wav2vec2", "audio", "Wav2Vec2Model", "Wav2Vec2Config", {}, [("input_values", [16000])]),
    ("hubert", "audio", "HubertModel", "HubertConfig", {}, [("input_values", [16000])]),
    ("wavlm", "audio", "WavLMModel", "WavLMConfig", {}, [("input_values", [16000])]),
    ("whisper-encoder", "speech", "WhisperModel", "WhisperConfig", {}, [("input_features", [80, 3000])]),
    ("clip-vision", "vision-tower", "CLIPVisionModel", "CLIPVisionConfig", {}, [("pixel_values", [3, 224, 224])]),
    ("siglip-vision", "vision-tower", "SiglipVisionModel", "SiglipVisionConfig", {}, [("pixel_values", [3, 224, 224])]),
    ("dinov2", "vision-tower", "Dinov2Model", "Dinov2Config", {}, [("pixel_values", [3, 224, 224])]),
    ("t5", "encoder-decoder", "T5Model", "T5Config", {}, [("input_ids", "ids:128"), ("decoder_input_ids", "ids:32")]),
    ("bart", "encoder-decoder", "BartModel", "BartConfig", {}, [("input_ids", "ids:128"), ("decoder_input_ids", "ids:32")]),
    ("whisper", "encoder-decoder", "WhisperModel", "WhisperConfig", {}, [("input_features", [80, 3000]), ("decoder_input_ids", "ids:32")]),
]
# timm's models: one per family that torchvision and transformers do not already cover, chosen
# for the shapes of their graphs (split-attention, multi-resolution branches, dual paths, mixed
# kernels, MLP mixers, hybrid convolution-attention, relative position biases, two-branch
# transformers) rather than their accuracy.
TIMM = """
    resnet50d resnest50d res2net50_26w_4s dpn68 xception41 cspdarknet53 cspresnext50 hrnet_w18
    ghostnet_100 rexnet_100 tresnet_m dm_nfnet_f0 nf_resnet50 regnetz_b16 efficientnetv2_rw_s
    mixnet_m selecsls42b dla34 ese_vovnet19b_dw repvgg_a2 mobilevit_s efficientformer_l1 levit_128
    poolformer_s12 convmixer_768_32 coat_lite_mini twins_svt_small pit_s_224 cait_xxs24_224
    deit_small_patch16_224 beit_base_patch16_224 mixer_b16_224 resmlp_12_224 gmlp_s16_224
    crossvit_9_240 xcit_tiny_12_p16_224 volo_d1_224 edgenext_small inception_v4 inception_resnet_v2
    nasnetalarge pnasnet5large gernet_m fbnetv3_b hardcorenas_a lcnet_100 tinynet_a
    mobilenetv4_conv_small efficientvit_b0 fastvit_t8 repvit_m1 hgnet_tiny eva02_tiny_patch14_224
    caformer_s18 davit_tiny focalnet_tiny_srf coatnet_0_rw_224 maxvit_tiny_rw_224 sequencer2d_s
    nest_tiny tnt_s_patch16_224 visformer_small swinv2_cr_tiny_224 inception_next_tiny
    convnextv2_tiny mambaout_femto
""".split()
# Batch of the random inputs BatchNorm's statistics are measured on.
CALIBRATION_BATCH = 8
CALIBRATION_BATCHES = 4


def spec(shape, dtype="float32", low=None, high=None):
    text = "x".join(str(d) for d in shape) + ":" + dtype
    return text if low is None else f"{text}:{low}:{high}"


def torchvision_models(batch):
    import torchvision

    for name in torchvision.models.list_models(module=torchvision.models):
        def build(name=name):
            model = torchvision.models.get_model(name, weights=None)
            if name.startswith("inception") or name == "googlenet":
                model.aux_logits = False
                model.AuxLogits = None
                if hasattr(model, "aux1"):
                    model.aux1 = model.aux2 = None
            # ViTs fix their image size at construction; the others take their weights' crop.
            size = getattr(model, "image_size", None)
            if size is None:
                weights = torchvision.models.get_model_weights(name).DEFAULT
                size = weights.transforms().crop_size[0]
            return model, [torch.randn(batch, 3, size, size)], [spec([batch, 3, size, size])]

        yield name, build, f"torchvision.models.{name}(weights=None), default input size"


# torchvision's families beyond classification (`--set torchvision-families`): the module each
# lists its models in, by family.
TORCHVISION_FAMILIES = {"segmentation": "segmentation", "video": "video", "optical-flow": "optical_flow", "detection": "detection"}
VIDEO_FRAMES = 16
FLOW_SIZE = (368, 496)
DETECTION_SIZE = 320


class Segmentation(torch.nn.Module):
    """A segmentation model's "out" map (its auxiliary head, when built, is for training)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


class Flow(torch.nn.Module):
    """RAFT's last (finest) flow estimate between two frames."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, first, second):
        return self.model(first, second)[-1]


class Detector(torch.nn.Module):
    """A detector on a batch of images as one tensor: the first image's boxes, scores and labels
    (their number depends on the image: non-maximum suppression decides it)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, images):
        found = self.model(list(images))[0]
        return found["boxes"], found["scores"], found["labels"]


def torchvision_family_models(batch):
    import torchvision

    for family, module in TORCHVISION_FAMILIES.items():
        for name in torchvision.models.list_models(module=getattr(torchvision.models, module)):
            def build(name=name, family=family):
                weights = torchvision.models.get_model_weights(name).DEFAULT
                if family == "detection":
                    model = torchvision.models.get_model(name, weights=None, weights_backbone=None)
                    shape = [batch, 3, DETECTION_SIZE, DETECTION_SIZE]
                    return Detector(model), [torch.randn(shape)], [spec(shape)]
                if family == "optical-flow":
                    model = torchvision.models.get_model(name, weights=None)
                    shape = [batch, 3, *FLOW_SIZE]
                    return Flow(model), [torch.randn(shape), torch.randn(shape)], [spec(shape), spec(shape)]
                transforms = weights.transforms()
                if family == "segmentation":
                    model = Segmentation(torchvision.models.get_model(name, weights=None, weights_backbone=None))
                    size = transforms.resize_size[0]
                    shape = [batch, 3, size, size]
                else:
                    model = torchvision.models.get_model(name, weights=None)
                    frames = max(VIDEO_FRAMES, weights.meta.get("min_temporal_size", 1))
                    shape = [batch, 3, frames, *transforms.crop_size]
                return model, [torch.randn(shape)], [spec(shape)]

            yield name, build, f"torchvision.models.get_model('{name}', weights=None), family {family}"


def transformers_models(batch):
    import transformers

    for name, model_class, config_class, kind, source in TRANSFORMERS:
        def build(model_class=model_class, config_class=config_class, kind=kind):
            config = getattr(transformers, config_class)()
            # Tuples instead of ModelOutput (transformers 5 no longer reads `torchscript`), and no
            # key-value cache object, which the tracer cannot return.
            config.torchscript = True
            config.return_dict = False
            config.use_cache = False
            model = getattr(transformers, model_class)(config)
            if kind == "image":
                size = config.image_size
                return model, [torch.randn(batch, 3, size, size)], [spec([batch, 3, size, size])]
            ids = torch.randint(0, config.vocab_size, (batch, SEQUENCE))
            return model, [ids], [spec([batch, SEQUENCE], "int64", 0, config.vocab_size)]

        yield name, build, source


class Keywords(torch.nn.Module):
    """A model called with keyword arguments, as a module of positional tensors (what the tracer
    and `infer --torchscript` pass), returning its first output (the last hidden state)."""

    def __init__(self, model, names, part=None):
        super().__init__()
        self.model = model if part is None else getattr(model, part)
        self.names = list(names)

    def forward(self, *tensors):
        return self.model(**dict(zip(self.names, tensors)))[0]


def family_models(batch):
    import transformers

    for name, family, model_class, config_class, arguments, inputs in FAMILIES:
        def build(model_class=model_class, config_class=config_class, arguments=arguments, inputs=inputs, name=name):
            config = getattr(transformers, config_class)(**arguments)
            if hasattr(config, "use_cache"):
                config.use_cache = False  # no key-value cache object, which the tracer cannot return
            model = getattr(transformers, model_class)(config)
            tensors, specs = [], []
            for _, kind in inputs:
                if isinstance(kind, str):
                    length = int(kind.split(":")[1])
                    tensors.append(torch.randint(0, config.vocab_size, (batch, length)))
                    specs.append(spec([batch, length], "int64", 0, config.vocab_size))
                else:
                    tensors.append(torch.randn(batch, *kind))
                    specs.append(spec([batch, *kind]))
            part = "encoder" if name == "whisper-encoder" else None
            return Keywords(model, [n for n, _ in inputs], part), tensors, specs

        stated = ", ".join(f"{k}={v}" for k, v in arguments.items()) or "defaults"
        yield name, build, f"transformers {model_class}({config_class}({stated})), family {family}"


def timm_models(batch):
    for name in TIMM:
        def build(name=name):
            import timm

            model = timm.create_model(name, pretrained=False)
            c, h, w = model.pretrained_cfg.get("input_size", (3, 224, 224))
            return model, [torch.randn(batch, c, h, w)], [spec([batch, c, h, w])]

        yield name, build, f"timm.create_model('{name}', pretrained=False), default input size"


def informative_weights(model, example_inputs):
    """Makes a randomly initialized model's output depend on its input at a realistic scale, so
    that comparing a prepared graph with eager proves something. Left as initialized, torchvision's
    ViT heads are zero (the output is 0 for every input); and BatchNorm layers that never saw
    data keep mean 0 and variance 1, so activations shrink layer by layer (EfficientNet's outputs
    were about 1e-14, GoogLeNet's the same for every input) and folding BatchNorm into the
    convolutions is nearly the identity. So: every all-zero weight matrix is drawn from
    N(0, 0.02^2), and BatchNorm's running statistics are measured on random inputs shaped like
    the example ones (training mode, the cumulative average over a few batches), as a model that
    saw data has them. Returns what was changed, for the manifest."""
    notes = []
    with torch.no_grad():
        zero = [name for name, p in model.named_parameters() if p.dim() >= 2 and not p.any()]
        for name, p in model.named_parameters():
            if name in zero:
                p.normal_(0.0, 0.02)
        if zero:
            notes.append(f"all-zero weights drawn from N(0, 0.02^2): {', '.join(zero)}")
        norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
        if norms and all(x.is_floating_point() for x in example_inputs):
            momenta = [m.momentum for m in norms]
            for m in norms:
                m.reset_running_stats()
                m.momentum = None
            model.train()
            try:
                for _ in range(CALIBRATION_BATCHES):
                    model(*[torch.randn(CALIBRATION_BATCH, *x.shape[1:], device=x.device, dtype=x.dtype) for x in example_inputs])
                notes.append(f"running statistics of {len(norms)} BatchNorm layers measured on {CALIBRATION_BATCHES} random batches of {CALIBRATION_BATCH}")
            except Exception as e:  # a detector in training mode wants targets
                for m in norms:
                    m.reset_running_stats()
                notes.append(f"running statistics of {len(norms)} BatchNorm layers left as initialized: in training mode the model failed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
            model.eval()
            for m, momentum in zip(norms, momenta):
                m.momentum = momentum
    return notes


def counts_from_shapes():
    """nimble_rs.tracing's context (nimble-py/python/nimble_rs/tracing.py, loaded by its path:
    this script runs without nimble_rs installed): while tracing, a `repeat_interleave` count
    the trace computed from shapes alone is passed as the number it holds. The tracer hands a
    shape on as a 0-dim CPU tensor, so the tensor-of-repeats overload ran, and failed on the GPU
    ("index is on cpu"): torchvision's MViT-v1-B did so in its positional encoding."""
    path = Path(__file__).resolve().parents[2] / "nimble-py" / "python" / "nimble_rs" / "tracing.py"
    loaded = importlib.util.spec_from_file_location("nimble_rs_tracing", path)
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module.counts_from_shapes()


def paste_masks_on_their_device(masks, boxes, im_h, im_w):
    """Mask R-CNN's masks pasted into the image, each resized to its box (bilinear) and clipped
    to the image, as torchvision's postprocessing does; scripted (see
    masks_pasted_on_their_device)."""
    height, width = int(im_h), int(im_w)
    pasted = torch.zeros(masks.size(0), height, width, dtype=masks.dtype, device=masks.device)
    for i in range(masks.size(0)):
        box: List[int] = boxes[i].tolist()
        x0, y0, x1, y1 = box[0], box[1], box[2], box[3]
        resized = torch.nn.functional.interpolate(masks[i : i + 1, :1], size=[max(y1 - y0 + 1, 1), max(x1 - x0 + 1, 1)], mode="bilinear", align_corners=False)[0, 0]
        top, bottom, left, right = max(y0, 0), min(y1 + 1, height), max(x0, 0), min(x1 + 1, width)
        if bottom > top and right > left:
            pasted[i, top:bottom, left:right] = resized[top - y0 : bottom - y0, left - x0 : right - x0]
    return pasted


@contextlib.contextmanager
def masks_pasted_on_their_device():
    """While tracing, torchvision pastes Mask R-CNN's masks with a scripted loop that makes its
    zeros and ones on the CPU, so on a GPU it fails ("The following operation failed in the
    TorchScript interpreter": tensors on two devices). This replaces that loop with ours, which
    makes them on the masks' device (a detector is no CUDA graph anyway, NMS decides how many
    boxes there are: exporting it lets coverage say so)."""
    from torchvision.models.detection import roi_heads

    original = roi_heads._onnx_paste_masks_in_image_loop
    roi_heads._onnx_paste_masks_in_image_loop = torch.jit.script(paste_masks_on_their_device)
    try:
        yield
    finally:
        roi_heads._onnx_paste_masks_in_image_loop = original


def versions():
    """The versions of the model libraries this process has, for the manifest."""
    found = {}
    for module in ("torchvision", "transformers", "timm"):
        try:
            found[module] = __import__(module).__version__
        except ImportError:
            pass
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir")
    parser.add_argument("--set", choices=["torchvision", "transformers", "timm", "all", "transformers-families", "torchvision-families"], default="all")
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    only = {n for n in args.only.split(",") if n}
    sources = []
    if args.set in ("torchvision", "all"):
        sources.append(torchvision_models(args.batch))
    if args.set in ("transformers", "all"):
        sources.append(transformers_models(args.batch))
    if args.set in ("timm", "all"):
        sources.append(timm_models(args.batch))
    if args.set == "transformers-families":
        sources.append(family_models(args.batch))
    if args.set == "torchvision-families":
        sources.append(torchvision_family_models(args.batch))
    families = {name: family for name, family, *_ in FAMILIES}
    if args.set == "torchvision-families":
        import torchvision

        for family, module in TORCHVISION_FAMILIES.items():
            families.update({name: family for name in torchvision.models.list_models(module=getattr(torchvision.models, module))})
    manifest_path = os.path.join(args.dir, "manifest.json")
    libraries = versions()
    manifest = []
    for models in sources:
        for name, build, source in models:
            if only and name not in only:
                continue
            entry = {"name": name, "file": f"{name}.pt", "source": source}
            if args.set in ("transformers-families", "torchvision-families"):
                entry["family"] = families[name]
            started = time.time()
            try:
                torch.manual_seed(0)
                model, inputs, specs = build()
                model = model.eval().to(args.device)
                inputs = [x.to(args.device) for x in inputs]
                entry["weights"] = informative_weights(model, inputs)
                with torch.no_grad(), counts_from_shapes(), contextlib.ExitStack() as fixes:
                    if entry.get("family") == "detection":
                        fixes.enter_context(masks_pasted_on_their_device())
                    # strict=False lets dicts through (their structure is fixed for fixed shapes).
                    traced = torch.jit.trace(model, tuple(inputs), check_trace=False, strict=False)
                    traced.save(os.path.join(args.dir, entry["file"]))
                entry["inputs"] = specs
                entry["parameters"] = sum(p.numel() for p in model.parameters())
                del model, traced
            except Exception as e:  # recorded, never fatal: the experiment reports it
                entry["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                entry["traceback"] = traceback.format_exc(limit=3)
            entry["export_s"] = round(time.time() - started, 2)
            manifest.append(entry)
            print(f"{name}: {entry.get('error', 'ok')} ({entry['export_s']} s)", flush=True)
            if args.device == "cuda":
                torch.cuda.empty_cache()
            # Rewritten after every model, so a run cut short still leaves a usable manifest.
            with open(manifest_path + ".partial", "w") as f:
                json.dump({"torch": torch.__version__, "versions": libraries, "device": args.device, "batch": args.batch, "models": manifest}, f, indent=1)
            os.replace(manifest_path + ".partial", manifest_path)


if __name__ == "__main__":
    main()
