"""Real architectures, built inside the tests with random weights, and exported by both PyTorch
exporters.

Each :class:`Architecture` builds a network with random weights and randomized BatchNorm
statistics, so every normalization does real work, and makes one example input. Most come from
transformers' model definitions, built from small configs (transformers and torch are test
dependencies only: the ``zoo`` extra); the classic CNN families transformers lacks are written in
tests/zoo/vision_nets.py. Sizes are kept small (64-112
pixel images, 2-layer transformers from configs) so the whole table exports and converts within
CI's budget on 2 cores; the operators and graph shapes are those of the full-size models.

:func:`export` writes the ONNX file with the TorchScript-based exporter (``dynamo=False``) or the
``torch.export``-based one (``dynamo=True``), with a dynamic batch dimension either way.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

Feeds = dict[str, np.ndarray]
EXPORTERS = ("torchscript", "dynamo")


@dataclass(frozen=True)
class Architecture:
    name: str
    family: str  # "vision", "text" or "audio"
    build: Callable[[], Any]  # () -> torch.nn.Module in eval mode
    make_inputs: Callable[[np.random.Generator], Feeds]
    quant: str = "static"  # int8 mode checked: "static" for CNNs, "dynamic" for transformers
    dynamic_axes: dict[str, dict[int, str]] = field(default_factory=dict)
    outputs: tuple[str, ...] = ("logits",)
    torchscript_opset: int = 17  # the TorchScript exporter's opset (users' common choice)


# Vision architectures built around attention or token mixing (the rest of "vision" are CNNs).
VISION_TRANSFORMERS = frozenset({"vit", "deit_distilled", "beit", "dinov2", "swin", "swinv2", "levit", "mobilevit",
                                 "mobilevitv2", "poolformer", "pvt", "pvt_v2", "segformer", "focalnet", "swiftformer"})


def group(architecture: Architecture) -> str:
    """"cnn", "vision-transformer", "text" or "audio"."""
    if architecture.family != "vision":
        return architecture.family
    return "vision-transformer" if architecture.name in VISION_TRANSFORMERS else "cnn"


def _image(size: int, name: str = "image") -> Callable[[np.random.Generator], Feeds]:
    def make(rng: np.random.Generator) -> Feeds:
        return {name: rng.standard_normal((1, 3, size, size)).astype(np.float32)}

    return make


def _tokens(length: int, vocab: int, names=("input_ids", "attention_mask")) -> Callable[[np.random.Generator], Feeds]:
    def make(rng: np.random.Generator) -> Feeds:
        feeds = {"input_ids": rng.integers(0, vocab, (1, length), dtype=np.int64)}
        if "attention_mask" in names:
            feeds["attention_mask"] = np.ones((1, length), dtype=np.int64)
        return feeds

    return make


def _audio(samples: int) -> Callable[[np.random.Generator], Feeds]:
    def make(rng: np.random.Generator) -> Feeds:
        return {"input_values": rng.standard_normal((1, samples)).astype(np.float32)}

    return make


def _mel(bins: int, frames: int) -> Callable[[np.random.Generator], Feeds]:
    def make(rng: np.random.Generator) -> Feeds:
        return {"input_features": rng.standard_normal((1, bins, frames)).astype(np.float32)}

    return make


def randomize(module):
    """Random weights (seeded) and BatchNorm statistics far from the identity."""
    import torch

    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    for child in module.modules():
        if isinstance(child, torch.nn.modules.batchnorm._BatchNorm) and child.running_mean is not None:
            features = child.num_features
            child.running_mean.copy_(torch.randn(features, generator=generator) * 0.2)
            child.running_var.copy_(torch.rand(features, generator=generator) + 0.5)
            if child.affine:
                child.weight.data.copy_(torch.rand(features, generator=generator) + 0.5)
                child.bias.data.copy_(torch.randn(features, generator=generator) * 0.1)
    return module.eval()


def _net(name: str) -> Callable[[], Any]:
    def build():
        import torch

        from tests.zoo.vision_nets import NETWORKS

        torch.manual_seed(0)
        return randomize(NETWORKS[name]())

    return build


def _hf_vision(config_name: str, model_name: str, output: str = "logits", **config) -> Callable[[], Any]:
    def build():
        import torch
        import transformers

        torch.manual_seed(0)
        configuration = getattr(transformers, config_name)(num_labels=100, **config)
        model = getattr(transformers, model_name)(configuration)
        return _Logits.wrap(randomize(model), ("pixel_values",), output)

    return build


class _Logits:
    """Wraps a transformers model so the exporters see tensors in and one tensor out."""

    @staticmethod
    def wrap(model, inputs: tuple[str, ...], output: str = "logits"):
        import torch

        class Wrapper(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, *args):
                result = self.model(**dict(zip(inputs, args, strict=True)))
                return getattr(result, output)

        return Wrapper().eval()


def _hf(config_name: str, model_name: str, config: dict[str, Any], inputs: tuple[str, ...],
        output: str = "logits") -> Callable[[], Any]:
    def build():
        import torch
        import transformers

        torch.manual_seed(0)
        configuration = getattr(transformers, config_name)(**config)
        configuration._attn_implementation = "eager"
        model = getattr(transformers, model_name)(configuration)
        return _Logits.wrap(randomize(model), inputs, output)

    return build


def _whisper_encoder():
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.WhisperConfig(
        vocab_size=1000, d_model=64, encoder_layers=2, encoder_attention_heads=2, decoder_layers=1,
        decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16,
        max_source_positions=50, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    config._attn_implementation = "eager"
    encoder = transformers.WhisperModel(config).get_encoder()
    return _Logits.wrap(randomize(encoder), ("input_features",), "last_hidden_state")


def _wav2vec2():
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.Wav2Vec2Config(
        vocab_size=32, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
        conv_dim=(32, 32, 32, 32, 32, 32, 32), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
        do_stable_layer_norm=True, feat_extract_norm="layer")
    config._attn_implementation = "eager"
    return _Logits.wrap(randomize(transformers.Wav2Vec2ForCTC(config)), ("input_values",))


_TEXT = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
             max_position_embeddings=64)
_BATCH_SEQ = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}}
_IMAGE_AXES = {"image": {0: "batch"}}


def _vision(name: str, build, size: int = 64, **kwargs) -> Architecture:
    return Architecture(name, "vision", build, _image(size), dynamic_axes=_IMAGE_AXES, **kwargs)


def _text(name: str, build, length: int = 16, names=("input_ids", "attention_mask")) -> Architecture:
    axes = {key: value for key, value in _BATCH_SEQ.items() if key in names}
    return Architecture(name, "text", build, _tokens(length, 1000, names), quant="dynamic", dynamic_axes=axes)


def _hf_image(name: str, config_name: str, model_name: str, size: int = 64, output: str = "logits",
              opset: int = 17, quant: str = "static", **config) -> Architecture:
    return Architecture(name, "vision", _hf_vision(config_name, model_name, output, **config),
                        _image(size, "pixel_values"), quant=quant, dynamic_axes={"pixel_values": {0: "batch"}},
                        torchscript_opset=opset)


def _hf_attention(name: str, config_name: str, model_name: str, **config) -> Architecture:
    """A vision transformer: int8 is checked in the transformers' (dynamic) form, as for text."""
    return _hf_image(name, config_name, model_name, quant="dynamic", **config)


_STAGES = dict(depths=[1, 1, 2, 1])
_VIT = dict(image_size=64, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=128)

ARCHITECTURES: tuple[Architecture, ...] = (
    # written after the papers (tests/zoo/vision_nets.py)
    _vision("mobilenet_v3", _net("mobilenet_v3")),
    _vision("ghostnet", _net("ghostnet")),
    _vision("repvgg", _net("repvgg")),
    _vision("densenet", _net("densenet")),
    _vision("googlenet", _net("googlenet")),
    _vision("shufflenet_v2", _net("shufflenet_v2")),
    _vision("squeezenet", _net("squeezenet")),
    _vision("resnext", _net("resnext")),
    # transformers' vision models, from configs
    _hf_image("resnet18", "ResNetConfig", "ResNetForImageClassification", embedding_size=32,
              hidden_sizes=[32, 64, 128, 256], depths=[2, 2, 2, 2], layer_type="basic"),
    _hf_image("resnet50", "ResNetConfig", "ResNetForImageClassification", embedding_size=32,
              hidden_sizes=[64, 128, 256, 512], depths=[1, 1, 1, 1], layer_type="bottleneck"),
    _hf_image("bit", "BitConfig", "BitForImageClassification", embedding_size=32, hidden_sizes=[64, 128, 256, 512],
              depths=[1, 1, 1, 1], num_groups=8),
    _hf_image("mobilenet_v1", "MobileNetV1Config", "MobileNetV1ForImageClassification", image_size=64,
              depth_multiplier=0.25),
    _hf_image("mobilenet_v2", "MobileNetV2Config", "MobileNetV2ForImageClassification", image_size=64,
              depth_multiplier=0.35),
    _hf_image("efficientnet", "EfficientNetConfig", "EfficientNetForImageClassification", image_size=64,
              width_coefficient=0.5, depth_coefficient=0.5, hidden_dim=640),
    _hf_image("regnet", "RegNetConfig", "RegNetForImageClassification", embedding_size=16,
              hidden_sizes=[16, 32, 64, 128], groups_width=8, layer_type="y", **_STAGES),
    # PP-LCNet's classifier returns its logits as last_hidden_state.
    _hf_image("pplcnet", "PPLCNetConfig", "PPLCNetForImageClassification", output="last_hidden_state"),
    _hf_image("hgnetv2", "HGNetV2Config", "HGNetV2ForImageClassification", hidden_sizes=[64, 128, 256, 512],
              stage_in_channels=[48, 64, 128, 256], stage_mid_channels=[24, 48, 96, 192],
              stage_out_channels=[64, 128, 256, 512], stage_num_blocks=[1, 1, 1, 1], stage_numb_of_layers=[3, 3, 3, 3]),
    _hf_image("convnext", "ConvNextConfig", "ConvNextForImageClassification", hidden_sizes=[24, 48, 96, 192],
              **_STAGES),
    _hf_image("convnextv2", "ConvNextV2Config", "ConvNextV2ForImageClassification",
              hidden_sizes=[24, 48, 96, 192], **_STAGES),
    _hf_attention("vit", "ViTConfig", "ViTForImageClassification", **_VIT),
    _hf_attention("deit_distilled", "DeiTConfig", "DeiTForImageClassificationWithTeacher", **_VIT),
    _hf_attention("beit", "BeitConfig", "BeitForImageClassification", use_relative_position_bias=True, **_VIT),
    _hf_attention("dinov2", "Dinov2Config", "Dinov2ForImageClassification", image_size=64, patch_size=8,
              hidden_size=64, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2),
    _hf_attention("swin", "SwinConfig", "SwinForImageClassification", image_size=64, patch_size=2, embed_dim=32,
              num_heads=[1, 2, 4, 8], window_size=4, **_STAGES),
    _hf_attention("swinv2", "Swinv2Config", "Swinv2ForImageClassification", image_size=64, patch_size=4,
              embed_dim=32, num_heads=[1, 2, 4, 8], window_size=4, **_STAGES),
    _hf_attention("levit", "LevitConfig", "LevitForImageClassificationWithTeacher", image_size=64,
              hidden_sizes=[64, 96, 128], num_attention_heads=[2, 3, 4], depths=[1, 1, 1], key_dim=[16, 16, 16]),
    _hf_image("mobilevit", "MobileViTConfig", "MobileViTForImageClassification", image_size=64,
              hidden_sizes=[64, 80, 96], neck_hidden_sizes=[16, 16, 24, 48, 64, 80, 320]),
    # MobileViTV2 folds patches back with col2im, an opset 18 operator (the TorchScript exporter
    # still fails on it: tests/zoo/test_architectures.py EXCLUSIONS).
    _hf_image("mobilevitv2", "MobileViTV2Config", "MobileViTV2ForImageClassification", image_size=64,
              width_multiplier=0.5, opset=18),
    _hf_image("poolformer", "PoolFormerConfig", "PoolFormerForImageClassification", hidden_sizes=[32, 64, 96, 128],
              **_STAGES),
    _hf_attention("pvt", "PvtConfig", "PvtForImageClassification", image_size=64, hidden_sizes=[16, 32, 64, 128],
              depths=[1, 1, 1, 1], num_attention_heads=[1, 1, 2, 4]),
    _hf_attention("pvt_v2", "PvtV2Config", "PvtV2ForImageClassification", hidden_sizes=[16, 32, 64, 128],
              depths=[1, 1, 1, 1], num_attention_heads=[1, 1, 2, 4]),
    _hf_attention("segformer", "SegformerConfig", "SegformerForImageClassification", hidden_sizes=[16, 32, 64, 128],
              depths=[1, 1, 1, 1], num_attention_heads=[1, 1, 2, 4]),
    _hf_image("focalnet", "FocalNetConfig", "FocalNetForImageClassification", image_size=64, embed_dim=32,
              **_STAGES),
    _hf_image("swiftformer", "SwiftFormerConfig", "SwiftFormerForImageClassification",
              embed_dims=[24, 48, 96, 192], **_STAGES),
    # transformers, from configs
    _text("bert", _hf("BertConfig", "BertForSequenceClassification", _TEXT, ("input_ids", "attention_mask"))),
    _text("distilbert", _hf("DistilBertConfig", "DistilBertForSequenceClassification",
                            dict(vocab_size=1000, dim=64, n_layers=2, n_heads=2, hidden_dim=128,
                                 max_position_embeddings=64), ("input_ids", "attention_mask"))),
    _text("roberta", _hf("RobertaConfig", "RobertaForSequenceClassification", _TEXT,
                         ("input_ids", "attention_mask"))),
    _text("albert", _hf("AlbertConfig", "AlbertForSequenceClassification", dict(_TEXT, embedding_size=32),
                        ("input_ids", "attention_mask"))),
    _text("gpt2", _hf("GPT2Config", "GPT2LMHeadModel",
                      dict(vocab_size=1000, n_embd=64, n_layer=2, n_head=2, n_positions=64, use_cache=False),
                      ("input_ids", "attention_mask"))),
    _text("t5_encoder", _hf("T5Config", "T5EncoderModel",
                            dict(vocab_size=1000, d_model=64, d_kv=32, d_ff=128, num_layers=2, num_heads=2),
                            ("input_ids", "attention_mask"), output="last_hidden_state")),
    _text("llama", _hf("LlamaConfig", "LlamaForCausalLM",
                       dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                            num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                            use_cache=False), ("input_ids", "attention_mask"))),
    Architecture("whisper_encoder", "audio", _whisper_encoder, _mel(16, 100), quant="dynamic",
                 dynamic_axes={"input_features": {0: "batch"}}),
    Architecture("wav2vec2", "audio", _wav2vec2, _audio(4000), quant="dynamic",
                 dynamic_axes={"input_values": {0: "batch", 1: "samples"}}),
)

BY_NAME = {architecture.name: architecture for architecture in ARCHITECTURES}


def export(architecture: Architecture, exporter: str, path: Path, feeds: Feeds) -> Path:
    """Write ``architecture`` to ``path`` with ``exporter`` ("torchscript" or "dynamo")."""
    import torch

    model = _Positional(architecture.build())
    names = list(feeds)
    args = tuple(torch.from_numpy(feeds[name]) for name in names)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), torch.no_grad():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            torch.onnx.export(model, args, str(path), input_names=names, output_names=list(architecture.outputs),
                              dynamic_axes=architecture.dynamic_axes, opset_version=architecture.torchscript_opset,
                              dynamo=False)
        elif exporter == "dynamo":
            shapes = tuple({axis: torch.export.Dim.DYNAMIC for axis in architecture.dynamic_axes.get(name, {})}
                           for name in names)
            program = torch.onnx.export(
                model, args, input_names=names, output_names=list(architecture.outputs),
                dynamic_shapes={"args": shapes}, dynamo=True, verbose=False)
            program.save(str(path))
        else:
            raise ValueError(f"unknown exporter {exporter!r}: expected one of {EXPORTERS}")
    return path


def export_by_name(name: str, exporter: str, path: Path) -> Path:
    """:func:`export` of the architecture called ``name`` on its seed-0 inputs (a picklable job)."""
    architecture = BY_NAME[name]
    return export(architecture, exporter, path, architecture.make_inputs(np.random.default_rng(0)))


def _Positional(model):
    """``model`` behind ``forward(*args)``, so both exporters take the same dynamic-shape spec."""
    import torch

    class Positional(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, *args):
            return self.inner(*args)

    return Positional().eval()
