"""A tiny detector shaped as Ultralytics exports YOLOv8/11 (the tests' stand-in for yolo.onnx).

Two strides (8 and 16), a DFL box head (softmax over 16 bins, expectation by a fixed 1x1
convolution), boxes decoded against the anchor grid to (cx, cy, w, h) in input pixels, class
scores through a sigmoid, everything concatenated into one raw head ``[N, 4 + C, anchors]``
with NMS left outside the model, as ``yolo export format=onnx`` leaves it. Seeded random
weights: the detections are meaningless but the graph has the real export's operators
(Conv, SiLU, Softmax, Concat, Reshape, Sub/Add/Mul/Div), which is what the framework paths
must carry. ``nms=True`` appends a fixed top-K selection so the output is ``[N, K, 6]``
(x1, y1, x2, y2, score, class): a model with its NMS-style selection inside.
"""

from __future__ import annotations

from pathlib import Path

BINS = 16


def _module(num_classes: int, size: int, nms: bool, top_k: int):
    import torch
    from torch import nn

    def conv(cin: int, cout: int, stride: int = 1) -> nn.Module:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1), nn.SiLU())

    class TinyYolo(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(conv(3, 8, 2), conv(8, 16, 2), conv(16, 16, 2))  # /8
            self.down = conv(16, 32, 2)  # /16
            self.box = nn.ModuleList([nn.Conv2d(c, 4 * BINS, 1) for c in (16, 32)])
            self.cls = nn.ModuleList([nn.Conv2d(c, num_classes, 1) for c in (16, 32)])
            self.dfl = nn.Conv2d(BINS, 1, 1, bias=False)
            self.dfl.weight.data[:] = torch.arange(BINS, dtype=torch.float32).view(1, BINS, 1, 1)
            self.dfl.requires_grad_(False)
            anchors, strides = [], []
            for stride in (8, 16):
                cells = size // stride
                ys, xs = torch.meshgrid(torch.arange(cells), torch.arange(cells), indexing="ij")
                grid = torch.stack([xs, ys], 0).reshape(2, -1).float() + 0.5
                anchors.append(grid)
                strides.append(torch.full((1, cells * cells), float(stride)))
            self.register_buffer("anchors", torch.cat(anchors, 1))
            self.register_buffer("strides", torch.cat(strides, 1))

        def forward(self, x):
            p8 = self.stem(x)
            features = (p8, self.down(p8))
            boxes, scores = [], []
            for level, feature in enumerate(features):
                n = feature.shape[0]
                boxes.append(self.box[level](feature).reshape(n, 4 * BINS, -1))
                scores.append(self.cls[level](feature).reshape(n, num_classes, -1))
            box = torch.cat(boxes, 2)
            n, _, count = box.shape
            bins = box.reshape(n, 4, BINS, count).transpose(2, 1).softmax(1)
            ltrb = self.dfl(bins).reshape(n, 4, count)
            lt, rb = ltrb.chunk(2, 1)
            x1y1, x2y2 = self.anchors - lt, self.anchors + rb
            xywh = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * self.strides
            head = torch.cat((xywh, torch.cat(scores, 2).sigmoid()), 1)
            if not nms:
                return head
            score, cls = head[:, 4:].max(1)
            top, order = score.topk(top_k, 1)
            picked = head[:, :4].gather(2, order.unsqueeze(1).expand(-1, 4, -1))
            cxcy, wh = picked[:, :2], picked[:, 2:]
            corners = torch.cat((cxcy - wh / 2, cxcy + wh / 2), 1).transpose(1, 2)
            classes = cls.gather(1, order).float()
            return torch.cat((corners, top.unsqueeze(2), classes.unsqueeze(2)), 2)

    torch.manual_seed(0)
    return TinyYolo().eval()


def tiny_yolo_onnx(path: str | Path, num_classes: int = 3, size: int = 64, nms: bool = False,
                   top_k: int = 20) -> Path:
    """Write the tiny detector to ``path`` as ONNX (dynamic batch, opset 17) and return it."""
    import torch

    model = _module(num_classes, size, nms, top_k)
    path = Path(path)
    with torch.no_grad():
        torch.onnx.export(model, (torch.rand(1, 3, size, size),), str(path),
                          input_names=["images"], output_names=["output0"], opset_version=17,
                          dynamic_axes={"images": {0: "batch"}, "output0": {0: "batch"}},
                          dynamo=False)
        stated = model(torch.rand(1, 3, size, size)).shape
    _state_output_dims(path, stated[1], stated[2])
    return path


def _state_output_dims(path: Path, rows: int, columns: int) -> None:
    """Write the output's fixed dimensions into the file, as Ultralytics' exports state them
    (torch's exporter leaves the shape ops' results symbolic)."""
    import onnx

    proto = onnx.load(str(path))
    dims = proto.graph.output[0].type.tensor_type.shape.dim
    for dim, value in zip(dims[1:], (rows, columns), strict=True):
        dim.ClearField("dim_param")
        dim.dim_value = int(value)
    onnx.save(proto, str(path))
