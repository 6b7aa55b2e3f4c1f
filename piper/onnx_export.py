"""Build the ONNX Runtime form of the bundled all-MiniLM-L6-v2 (docs/embeddings.md).

    python -m piper.onnx_export --prepare      # the default cache, if missing (make install)
    python -m piper.onnx_export --model-dir DIR --out FILE.onnx --source-sha256 HEX

Runs in a process of its own (``piper.embeddings`` starts it once, the first time
a process needs a model that is not cached yet), so the process that serves
vectors never imports torch. Steps, all from the local files, offline:

1. load the checksum-verified weights with transformers (eager attention) and
   trace the whole sentence-transformers pipeline — BERT, mean pooling over the
   attention mask, L2 normalisation — with torch.onnx (opset 17);
2. fuse it with onnxruntime's BERT optimiser (embedding + layer norm,
   attention, bias + GELU), leaving each residual add and layer norm as
   Add + Add + LayerNormalization rather than one SkipLayerNormalization:
   onnxruntime 1.32's CPU kernel for the fused node is several times slower
   than the three plain nodes (docs/embeddings.md);
   the session must then be opened with ``inference_session``, which keeps
   onnxruntime from fusing them again at load;
3. quantise the weights of every MatMul and Attention node to int8, one scale
   per output channel, except the feed-forward output projection of the first
   layer (its input has the widest range; quantising it costs about as much
   agreement as the next three layers together), with activations quantised
   dynamically at run time (one range per call; the embedder runs each text
   alone, so per text);
4. check the result against the torch model on fixed probe sentences (cosine
   >= PROBE_MIN_COSINE each) and write it atomically, with a JSON sidecar
   naming the source weights' SHA-256, the recipe and the file's own SHA-256.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnxruntime

# Bump when the steps above change: the cached file name carries it, so an
# older cache is rebuilt rather than reused.
RECIPE = "int8pc-ffn2fp32l0-unfusedln-v2"
# The layers whose feed-forward output projection stays in float32: layer 0
# buys most of the agreement with torch at no measurable speed; a second layer
# costs speed for little more (docs/embeddings.md, faithfulness).
FLOAT_FFN2_LAYERS = (0,)
OPSET = 17
# onnxruntime's load-time fusion that would turn the Add + Add +
# LayerNormalization left by _optimise back into SkipLayerNormalization.
SESSION_DISABLED_OPTIMIZERS = ("SkipLayerNormFusion",)
PROBE_MIN_COSINE = 0.98
PROBES = [
    "the batch job keeps dying halfway through",
    "ECS task OOM during batch run; increased memory to 4GB",
    "Alice prefers tea over coffee",
    "Reset the router's admin password",
    "x",
    "Deploy-agent rolled out billing-api v2.3.1 with kubectl in prod-eu-1.\n"
    "Health checks failed after 40 seconds; rolled back to the previous release.",
]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _trace(model_dir: Path, out: Path) -> None:
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(
        str(model_dir), local_files_only=True, attn_implementation="eager"
    ).eval()

    class SentenceEmbedding(torch.nn.Module):
        """What SentenceTransformer(model_dir) computes: BERT, mean pooling, L2 norm."""

        def __init__(self, bert: torch.nn.Module) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden = self.bert(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=torch.zeros_like(input_ids),
            ).last_hidden_state
            weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    # Two rows of different lengths, so nothing is specialised to one shape or to
    # an all-ones mask.
    ids = torch.tensor([[101, 7592, 2088, 102, 0], [101, 7592, 2088, 1996, 102]])
    mask = (ids != 0).long()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            SentenceEmbedding(model).eval(),
            (ids, mask),
            str(out),
            input_names=["input_ids", "attention_mask"],
            output_names=["embedding"],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "sequence"},
                "attention_mask": {0: "batch", 1: "sequence"},
                "embedding": {0: "batch"},
            },
            opset_version=OPSET,
            dynamo=False,
        )


def inference_session(path: Path | str, options=None) -> onnxruntime.InferenceSession:
    """An ONNX Runtime CPU session for a model this module built, as it must be opened."""
    import onnxruntime

    return onnxruntime.InferenceSession(
        str(path),
        options,
        providers=["CPUExecutionProvider"],
        disabled_optimizers=list(SESSION_DISABLED_OPTIMIZERS),
    )


def _optimise(src: Path, out: Path, model_dir: Path) -> None:
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    config = json.loads((model_dir / "config.json").read_text())
    options = FusionOptions("bert")
    options.enable_skip_layer_norm = False
    options.enable_bias_skip_layer_norm = False
    optimised = optimize_model(
        str(src),
        model_type="bert",
        num_heads=config["num_attention_heads"],
        hidden_size=config["hidden_size"],
        opt_level=1,
        optimization_options=options,
    )
    fused = optimised.get_fused_operator_statistics()
    layers = config["num_hidden_layers"]
    layer_norms = sum(node.op_type == "LayerNormalization" for node in optimised.model.graph.node)
    if (
        fused.get("Attention") != layers
        or fused.get("SkipLayerNormalization")
        or layer_norms != 2 * layers
    ):
        raise RuntimeError(
            f"onnxruntime's BERT fusion did not match the model: {fused}, "
            f"{layer_norms} LayerNormalization nodes"
        )
    optimised.save_model_to_file(str(out))


def _quantise(src: Path, out: Path) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(src)).graph
    keep_float = [
        node.name
        for node in graph.node
        if node.op_type == "MatMul"
        and any(f"/layer.{i}/output/dense/" in node.name for i in FLOAT_FFN2_LAYERS)
    ]
    if len(keep_float) != len(FLOAT_FFN2_LAYERS):
        raise RuntimeError(
            f"expected {len(FLOAT_FFN2_LAYERS)} FFN output MatMuls, found {keep_float}"
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_dynamic(
            str(src),
            str(out),
            weight_type=QuantType.QInt8,
            per_channel=True,
            op_types_to_quantize=["MatMul", "Attention"],
            nodes_to_exclude=keep_float,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )


def _probe(model_dir: Path, onnx_path: Path) -> float:
    """The lowest cosine between torch's and the ONNX model's vectors for PROBES."""
    import numpy as np
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

    reference = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
    expected = reference.encode(PROBES, normalize_embeddings=True, convert_to_numpy=True)
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(reference.max_seq_length)
    session = inference_session(onnx_path)
    lowest = 1.0
    for text, want in zip(PROBES, expected, strict=True):
        ids = np.array([tokenizer.encode(text).ids], dtype=np.int64)
        got = session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0][0]
        lowest = min(lowest, float(np.dot(got, want)))
    return lowest


def export(model_dir: Path, out: Path, *, source_sha256: str) -> dict:
    """Write the quantised model to ``out`` (atomically) and its sidecar; return the sidecar."""
    import onnxruntime
    import torch

    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".export-") as tmp:
        traced, fused, quantised = (Path(tmp) / n for n in ("traced.onnx", "fused.onnx", "q.onnx"))
        _trace(model_dir, traced)
        _optimise(traced, fused, model_dir)
        _quantise(fused, quantised)
        lowest = _probe(model_dir, quantised)
        if lowest < PROBE_MIN_COSINE:
            raise RuntimeError(
                f"the exported model disagrees with torch: cosine {lowest:.4f} on a probe "
                f"sentence (at least {PROBE_MIN_COSINE} required)"
            )
        sidecar = {
            "source": str(model_dir / "model.safetensors"),
            "source_sha256": source_sha256,
            "recipe": RECIPE,
            "onnx_sha256": _sha256(quantised),
            "probe_min_cosine": round(lowest, 6),
            "torch": torch.__version__,
            "onnxruntime": onnxruntime.__version__,
        }
        sidecar_tmp = Path(tmp) / "sidecar.json"
        sidecar_tmp.write_text(json.dumps(sidecar, indent=2) + "\n")
        os.replace(quantised, out)
        os.replace(sidecar_tmp, sidecar_path(out))
    return sidecar


def sidecar_path(onnx_path: Path) -> Path:
    return onnx_path.with_suffix(".json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--prepare",
        action="store_true",
        help="build the default embedder's cached model if missing (what make install runs)",
    )
    parser.add_argument("--model-dir", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--source-sha256")
    args = parser.parse_args(argv)
    if args.prepare:
        from piper.embeddings import prepare_onnx_model

        print(prepare_onnx_model())
        return 0
    if not (args.model_dir and args.out and args.source_sha256):
        parser.error("--model-dir, --out and --source-sha256 are required without --prepare")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    actual = _sha256(args.model_dir / "model.safetensors")
    if actual != args.source_sha256:
        print(f"model.safetensors has SHA-256 {actual}, not {args.source_sha256}", file=sys.stderr)
        return 2
    sidecar = export(args.model_dir, args.out, source_sha256=actual)
    print(json.dumps(sidecar))
    return 0


if __name__ == "__main__":
    sys.exit(main())
