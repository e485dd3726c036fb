"""The ONNX converter's handlers for the operators FFModel builds from several layers (through
the IR builder's composed operators, ``flexrt.torch._composites``): 1-D and transposed
convolutions, instance normalization, LSTM, Resize / Upsample, Pad, PRelu, Einsum, LogSoftmax, and
ScatterND of computed tensors at constant indices that write a region cut along one axis (torch's
``x[:, :, :, :n] = v`` exported: SETITEM).
A mixin of ``flexrt.onnx.model._Converter`` (``self.error``, ``self.ir``, ``self._layer``,
``self._array_operand``, ``self.const``, ``self.m``).

Entry point: ``ComposedHandlers``.
"""

from __future__ import annotations

import numpy as np

from flexrt.ir.enums import ActiMode
from flexrt.torch._composites import CUBIC_A
from flexrt.torch._ir import IRNode

_NONE = ActiMode.AC_MODE_NONE.value


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else v


class ComposedHandlers:
    def _conv1d(self, node, name, a, w):
        """A 1-D convolution (weight [out, in / group, k]) as torch's Conv1d."""
        if any(d != 1 for d in a.get("dilations", [1])) or _text(a.get("auto_pad", "NOTSET")) not in ("NOTSET", "VALID"):
            raise self.error(node, name, "1-D convolutions with dilation or auto_pad SAME do not map")
        pads = list(a.get("pads", [0, 0]))
        if pads[0] != pads[-1]:
            raise self.error(node, name, f"pads {pads} are uneven (begin != end); FFModel pads both sides equally")
        groups = a.get("group", 1)
        bias = len(node.input) > 2 and node.input[2] != ""
        params = {"weight": (node.input[1], False)} | ({"bias": (node.input[2], False)} if bias else {})
        return self._layer(node, name, "CONV1D", [node.input[0]],
                           [w[0], a.get("kernel_shape", w[2:])[0], a.get("strides", [1])[0], pads[0], _NONE, groups,
                            int(bias)], [("in_channels", w[1] * groups)], "conv1d", params)

    def _ConvTranspose(self, node, name, a):
        """A 2-D transposed convolution (weight [in, out / group, kh, kw]); begin and end pads may differ."""
        w = self.shape(node, name, node.input[1])
        auto = a.get("auto_pad", b"NOTSET")
        if len(w) != 4 or any(d != 1 for d in a.get("dilations", [1, 1])) or "output_shape" in a or \
                (auto.decode() if isinstance(auto, bytes) else auto) not in ("NOTSET", "VALID"):
            raise self.error(node, name, f"only 2-D transposed convolutions without dilation, output_shape or "
                                         f"auto_pad SAME map (weight {list(w)}, attributes {sorted(a)})")
        kh, kw = a.get("kernel_shape", w[2:])
        sh, sw = a.get("strides", [1, 1])
        ph, pw, eh, ew = a.get("pads", [0, 0, 0, 0])
        groups = a.get("group", 1)
        bias = len(node.input) > 2 and node.input[2] != ""
        self.m.constants[f"{name}.groups"] = np.asarray(groups)    # the weight layout's group count
        params = {"weight": (node.input[1], False), "groups": (f"{name}.groups", False)} | \
            ({"bias": (node.input[2], False)} if bias else {})
        return self._layer(node, name, "CONV_TRANSPOSE2D", [node.input[0]],
                           [w[1] * groups, kh, kw, sh, sw, ph, pw, _NONE, groups, int(bias)],
                           [("output_padding", tuple(a.get("output_padding", [0, 0]))), ("padding_end", (eh, ew)),
                            ("in_channels", w[0])], "conv_transpose2d", params)

    def _LSTM(self, node, name, a):
        """A one-directional LSTM with the default activations: torch's nn.LSTM layer, unrolled into
        FFModel's LSTM cells (the builder's LSTM); outputs Y [T, 1, N, H] (layout 1: [N, T, 1, H]),
        Y_h and Y_c [1, N, H]."""
        inputs = list(node.input) + [""] * (8 - len(node.input))
        unsupported = [k for k in ("activations", "activation_alpha", "activation_beta", "clip") if k in a] + \
            (["input_forget"] if a.get("input_forget", 0) else []) + \
            (["direction"] if _text(a.get("direction", "forward")) != "forward" else []) + \
            [what for i, what in ((4, "sequence_lens"), (7, "peepholes")) if inputs[i]]
        if unsupported or "hidden_size" not in a:
            raise self.error(node, name, f"LSTM with {', '.join(unsupported) or 'no hidden_size'}: only a forward "
                                         f"LSTM with the default activations, every sequence whole, maps")
        hidden, layout = int(a["hidden_size"]), int(a.get("layout", 0))
        lstm = f"{name}.lstm"
        params = {"W": (inputs[1], False), "R": (inputs[2], False)} | ({"B": (inputs[3], False)} if inputs[3] else {})
        self.m.weights.append((f"{lstm}.l0", "lstm_onnx", params))
        ins = [inputs[0]] + ([inputs[5], inputs[6]] if inputs[5] and inputs[6] else [])
        where = f"ONNX node '{name}' (LSTM)"
        nodes = [IRNode(lstm, tuple(ins), (), "LSTM", (hidden, 1), (("batch_first", bool(layout)),), where),
                 IRNode(f"{lstm}.out", (lstm,), (), "GETITEM", (0,), (), where),
                 IRNode(f"{lstm}.state", (lstm,), (), "GETITEM", (1,), (), where)]
        outs = (list(node.output) + ["", "", ""])[:3]
        if outs[0]:
            nodes.append(IRNode(outs[0], (f"{lstm}.out",), (), "UNSQUEEZE", (2 if layout else 1,), (), where))
        for k, out in ((0, outs[1]), (1, outs[2])):
            if out:
                nodes.append(IRNode(out, (f"{lstm}.state",), (), "GETITEM", (k,), (), where))
        return nodes

    def _InstanceNormalization(self, node, name, a):
        """Per-channel normalization with a scale and shift (inputs 1, 2; torch's InstanceNorm, and the
        core of its GroupNorm export)."""
        x, scale, shift = node.input[:3]
        values = [self.m.constants.get(t) for t in (scale, shift)]
        eps = [("eps", a.get("epsilon", 1e-5))]
        if all(v is not None and t not in self.m.initializers for v, t in zip(values, (scale, shift))) and \
                np.all(values[0] == 1) and np.all(values[1] == 0):   # torch's GroupNorm export: no affine here
            return [self.ir(node, name, "GROUP_NORM", [x], [None], eps)]
        made, refs = [], []
        for t, v, part in zip((scale, shift), values, ("scale", "shift")):
            if v is None:
                refs.append(t)
                continue
            nodes, ref = self._array_operand(f"ONNX node '{name}' (InstanceNormalization)", t, v, f"{name}.{part}")
            made, refs = made + nodes, refs + [ref]
        return made + [self.ir(node, name, "GROUP_NORM", [x, *refs], [None], eps)]

    def _Pad(self, node, name, a):
        """Pad (constant, reflect, edge, wrap) of the axes after the batch; ONNX's pads are all begins
        then all ends, torch's (what the builder takes) (begin, end) pairs from the last axis back."""
        mode = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}.get(
            _text(a.get("mode", "constant")))
        pads = [int(v) for v in (self.const(node, name, 1, "pads") if len(node.input) > 1 and node.input[1]
                                 else a.get("pads", []))]
        value = float(self.const(node, name, 2, "constant_value").reshape(())) \
            if len(node.input) > 2 and node.input[2] else float(a.get("value", 0.0))
        if mode is None or (len(node.input) > 3 and node.input[3]) or len(pads) % 2 or not pads:
            mode_name = _text(a.get("mode", "constant"))
            raise self.error(node, name, f"mode {mode_name!r}, pads {pads}: constant, reflect, edge or wrap padding of "
                                         f"every axis (no axes input)")
        rank = len(pads) // 2
        begins, ends = pads[:rank], pads[rank:]
        if begins[0] or ends[0]:
            raise self.error(node, name, f"pads {pads} pad the batch axis; only the axes after it map")
        torch_pads = tuple(p for ax in range(rank - 1, 0, -1) for p in (begins[ax], ends[ax]))
        kws = [("mode", mode)] + ([("value", value)] if value else [])
        return [self.ir(node, name, "PAD", [node.input[0]], [torch_pads], kws)]

    def _Einsum(self, node, name, a):
        return [self.ir(node, name, "EINSUM", list(node.input), [_text(a["equation"])])]

    def _PRelu(self, node, name, a):
        """PRelu(X, slope): the slope an initializer (trainable) of one value or one per channel."""
        x, slope = node.input[:2]
        value = self.m.constants.get(slope)
        if value is None:
            return [self.ir(node, name, "PRELU", [x, slope])]
        made, ref = self._array_operand(f"ONNX node '{name}' (PRelu)", slope, value, f"{name}.slope")
        return made + [self.ir(node, name, "PRELU", [x, ref])]

    def _CumSum(self, node, name, a):
        """CumSum(x, axis): the axis a constant (an initializer or a folded value); exclusive and reverse."""
        axis = int(np.asarray(self.const(node, name, 1, "axis")).reshape(-1)[0])
        kws = [("exclusive", bool(a.get("exclusive", 0))), ("reverse", bool(a.get("reverse", 0)))]
        return [self.ir(node, name, "CUMSUM", [node.input[0]], [axis], kws)]

    def _LogSoftmax(self, node, name, a):
        return [self.ir(node, name, "LOG_SOFTMAX", [node.input[0]], [], [("dim", a.get("axis", -1))])]

    def _Resize(self, node, name, a):
        """Resize (opset 10+: X, roi, scales, sizes) and Upsample (X, scales) of the last one or two
        axes, nearest, linear or cubic, by torch's and ONNX's coordinate transformations."""
        mode = _text(a.get("mode", "nearest"))
        coords = _text(a.get("coordinate_transformation_mode", "half_pixel" if node.op_type == "Resize" else
                             "asymmetric"))
        rounding = _text(a.get("nearest_mode", "round_prefer_floor" if node.op_type == "Resize" else "floor"))
        if mode not in ("nearest", "linear", "cubic") or a.get("antialias", 0) or "axes" in a or \
                a.get("keep_aspect_ratio_policy", b"stretch") not in (b"stretch", "stretch") or \
                mode == "cubic" and (abs(a.get("cubic_coeff_a", CUBIC_A) - CUBIC_A) > 1e-6 or a.get("exclude_outside", 0)):
            raise self.error(node, name, f"mode {mode!r} with attributes {sorted(a)}: only nearest, linear and cubic "
                                         f"(cubic_coeff_a -0.75, exclude_outside 0: torch's) resizing of whole axes "
                                         f"maps")
        scale_at = 1 if node.op_type == "Upsample" or self.m.opset < 11 else 2
        scales = self.const(node, name, scale_at, "scales") if len(node.input) > scale_at and node.input[scale_at] \
            else np.asarray(a["scales"]) if "scales" in a else None
        sizes = self.const(node, name, 3, "sizes") if len(node.input) > 3 and node.input[3] else None
        given = sizes if sizes is not None and sizes.size else scales
        if given is None or given.size < 3 or given.size > 4:
            raise self.error(node, name, "needs scales or sizes for [N, C, L] or [N, C, H, W]")
        lead = [float(v) for v in given[:2]]
        x_shape = self.m.shapes.get(node.input[0]) or self.m.inferred.get(node.input[0])
        if (sizes is not None and sizes.size and x_shape is not None and [int(v) for v in sizes[:2]] != list(x_shape[:2])
                or (sizes is None or not sizes.size) and lead != [1.0, 1.0]):
            raise self.error(node, name, f"resizes the batch or channel axis ({given.tolist()}); only spatial axes map")
        kws = [("mode", mode), ("coords", coords), ("rounding", rounding)]
        kws.append(("size", tuple(int(v) for v in given[2:])) if given is sizes else
                   ("scale", tuple(float(v) for v in given[2:])))
        return [self.ir(node, name, "INTERPOLATE", [node.input[0]], [], kws)]

    _Upsample = _Resize


def scatter_region(indices: np.ndarray, shape: tuple) -> list | None:
    """The region ``indices`` (ScatterND's [..., r], constant) writes into a tensor of ``shape``, as
    (start, stop) per leading axis, when they list every position of a box in row-major order
    (negative positions counted from the end); else None."""
    r = indices.shape[-1]
    if r == 0 or r > len(shape) or indices.size == 0:
        return None
    flat = indices.reshape(-1, r).astype(np.int64)
    flat = np.where(flat < 0, flat + np.asarray(shape[:r], dtype=np.int64), flat)
    if (flat < 0).any() or (flat >= np.asarray(shape[:r], dtype=np.int64)).any():
        return None
    box = [(int(flat[:, k].min()), int(flat[:, k].max()) + 1) for k in range(r)]
    grid = np.stack(np.meshgrid(*[np.arange(lo, hi) for lo, hi in box], indexing="ij"), -1).reshape(-1, r)
    return box if grid.shape == flat.shape and bool((grid == flat).all()) else None


class ScatterHandlers:
    def _ScatterND(self, node, name, a):
        """ScatterND(data, constant indices, updates) writing a box cut along one axis: SETITEM of
        data at that axis' slice, the updates in the box's shape (of constants alone, folded
        before: ``flexrt.onnx._fold``)."""
        data, _, updates = node.input[:3]
        if _text(a.get("reduction", "none")) != "none":
            raise self.error(node, name, f"ScatterND with reduction {_text(a.get('reduction'))!r}; valid: none")
        indices = self.const(node, name, 1, "indices")
        shape = self.m.shapes.get(data) or self.m.inferred.get(data)   # declared, or inferred (a computed tensor)
        if shape is None or any(not isinstance(d, (int, np.integer)) for d in shape):
            raise self.error(node, name, f"the shape of '{data}' is unknown; export with fixed input shapes")
        shape = tuple(int(d) for d in shape)
        box = scatter_region(np.asarray(indices), shape)
        cut = [k for k, (lo, hi) in enumerate(box or ()) if (lo, hi) != (0, shape[k])]
        if box is None or len(cut) > 1:
            raise self.error(node, name, "ScatterND maps where its constant indices list a box of the data cut along "
                                         "one axis (x[:, :, :n] = v); these do not")
        self.m.inferred.setdefault(node.output[0], shape)    # for a later reader (the next ScatterND's data)
        region = [hi - lo for lo, hi in box] + list(shape[len(box):])
        index = tuple(slice(lo, hi) if k in cut else slice(None) for k, (lo, hi) in enumerate(box))
        if not cut:      # every position: the updates are the result
            return [self.ir(node, name, "RESHAPE", [updates], region)]
        shaped = f"{name}.region"
        return [self.ir(node, name, "RESHAPE", [updates], region, output=shaped),
                self.ir(node, name, "SETITEM", [data, shaped], [index])]
