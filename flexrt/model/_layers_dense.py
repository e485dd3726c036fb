"""FFModel layers with weights or matrix products: dense, conv2d, pool2d, embedding, batch_norm,
layer_norm, multihead_attention, lsh_self_attention, batch_matmul, lstm. Signatures are FlexFlow's
(lsh_self_attention, which FlexFlow lacks, follows multihead_attention's conventions)."""

from __future__ import annotations

from flexrt.ir.datatype import DataType
from flexrt.ir.enums import ActiMode, AggrMode, PoolType
from flexrt.ir.ops import (BatchMatmulAttrs, BatchNormAttrs, Conv2DAttrs, EmbeddingAttrs, LayerNormAttrs,
                           LinearAttrs, LSHSelfAttentionAttrs, LSTMAttrs, MultiHeadAttentionAttrs,
                           Pool2DAttrs)
from flexrt.model import _check


class DenseLayers:
    """Mixin of ``FFModel``; every method adds one layer through ``FFModel._add_layer``."""

    def dense(self, input, out_dim, activation=ActiMode.AC_MODE_NONE, use_bias=True, datatype=DataType.DT_NONE,
              shared_op=None, kernel_initializer=None, bias_initializer=None, kernel_regularizer=None, name=None):
        """y = activation(x @ kernel + bias); x [..., in] -> [..., out_dim]. Weights: kernel [in, out_dim], bias.

        ``datatype`` is kept as an option: the output and weights have the input's type (DT_NONE,
        FlexFlow's default, means exactly that). ``kernel_regularizer`` (FlexFlow's: ``type`` L1 or
        L2 and ``_lambda``) adds ``_lambda * kernel`` (L2) or ``_lambda * sign(kernel)`` (L1) to the
        kernel's gradient at every update, once whatever the strategy."""
        w = "dense"
        kernel_regularizer = _check.regularizer(w, "kernel_regularizer", kernel_regularizer)
        attrs = LinearAttrs(_check.integer(w, "out_dim", out_dim, 1), _check.flag(w, "use_bias", use_bias),
                            _check.member(w, "activation", activation, ActiMode))
        _check.member(w, "datatype", datatype, DataType)
        return self._add_layer(w, attrs, [input], name, shared_op=shared_op, kernel_initializer=kernel_initializer,
                               bias_initializer=bias_initializer,
                               options=(("datatype", datatype), ("kernel_regularizer", kernel_regularizer))
                               ).outputs[0]

    def conv2d(self, input, out_channels, kernel_h, kernel_w, stride_h, stride_w, padding_h, padding_w,
               activation=ActiMode.AC_MODE_NONE, groups=1, use_bias=True, shared_op=None, kernel_initializer=None,
               bias_initializer=None, name=None):
        """2-D convolution of an NCHW tensor.

        ``groups=True`` counts as 1, as in FlexFlow, whose C API reads the bool as an int: FlexFlow's
        own scripts pass ``ActiMode.AC_MODE_RELU, True`` meaning activation and use_bias.
        """
        w = "conv2d"
        if groups is True:
            groups = 1
        attrs = Conv2DAttrs(
            _check.integer(w, "out_channels", out_channels, 1), _check.integer(w, "kernel_h", kernel_h, 1),
            _check.integer(w, "kernel_w", kernel_w, 1), _check.integer(w, "stride_h", stride_h, 1),
            _check.integer(w, "stride_w", stride_w, 1), _check.integer(w, "padding_h", padding_h, 0),
            _check.integer(w, "padding_w", padding_w, 0), _check.integer(w, "groups", groups, 1),
            _check.flag(w, "use_bias", use_bias), _check.member(w, "activation", activation, ActiMode))
        return self._add_layer(w, attrs, [input], name, shared_op=shared_op, kernel_initializer=kernel_initializer,
                               bias_initializer=bias_initializer).outputs[0]

    def pool2d(self, input, kernel_h, kernel_w, stride_h, stride_w, padding_h, padding_w,
               pool_type=PoolType.POOL_MAX, activation=ActiMode.AC_MODE_NONE, name=None):
        """Max or average pooling of an NCHW tensor."""
        w = "pool2d"
        attrs = Pool2DAttrs(
            _check.integer(w, "kernel_h", kernel_h, 1), _check.integer(w, "kernel_w", kernel_w, 1),
            _check.integer(w, "stride_h", stride_h, 1), _check.integer(w, "stride_w", stride_w, 1),
            _check.integer(w, "padding_h", padding_h, 0), _check.integer(w, "padding_w", padding_w, 0),
            _check.member(w, "pool_type", pool_type, PoolType), _check.member(w, "activation", activation, ActiMode))
        return self._add_layer(w, attrs, [input], name).outputs[0]

    def embedding(self, input, num_embeddings, embedding_dim, aggr, dtype=DataType.DT_FLOAT, shared_op=None,
                  kernel_initializer=None, name=None):
        """Rows of a [num_embeddings, embedding_dim] table for integer indices (``aggr`` sums or averages a
        bag); ``dtype`` is the table's and the output's type."""
        w = "embedding"
        attrs = EmbeddingAttrs(_check.integer(w, "num_embeddings", num_embeddings, 1),
                               _check.integer(w, "embedding_dim", embedding_dim, 1),
                               _check.member(w, "aggr", aggr, AggrMode), _check.member(w, "dtype", dtype, DataType))
        return self._add_layer(w, attrs, [input], name, shared_op=shared_op,
                               kernel_initializer=kernel_initializer).outputs[0]

    def batch_norm(self, input, relu=True, name=None):
        """Batch normalization over every dimension but channel 1, optionally followed by ReLU."""
        attrs = BatchNormAttrs(relu=_check.flag("batch_norm", "relu", relu))
        return self._add_layer("batch_norm", attrs, [input], name).outputs[0]

    def layer_norm(self, input, axes, elementwise_affine=True, eps=1e-5, use_bias=True, name=None):
        """Layer normalization over ``axes``; with ``elementwise_affine`` a scale (gamma) and, when
        ``use_bias``, a shift (beta) of the normalized dimensions' shape.

        ``axes`` are the trailing dimensions, in NumPy's numbering (``[1, 2]`` of a 3-D input) or in
        FlexFlow's current one, where indices count from the last dimension (``[0, 1]``: the last two;
        FlexFlow requires exactly ``0 .. k-1``). The two never conflict: ``0 .. k-1`` are trailing
        NumPy dimensions only when ``k`` is the rank, where both mean every dimension."""
        w = "layer_norm"
        axes = _check.int_tuple(w, "axes", axes, allow_int=True)
        dims = getattr(input, "dims", None)
        rank = len(dims) if isinstance(dims, tuple) else 0  # a non-tensor input is refused below
        if axes and 0 < len(axes) < rank and sorted(axes) == list(range(len(axes))):
            axes = tuple(rank - 1 - a for a in sorted(axes, reverse=True))
        attrs = LayerNormAttrs(axes,
                               _check.flag(w, "elementwise_affine", elementwise_affine),
                               _check.number(w, "eps", eps, low=0.0, low_open=True),
                               _check.flag(w, "use_bias", use_bias))
        return self._add_layer(w, attrs, [input], name).outputs[0]

    def multihead_attention(self, query, key, value, embed_dim, num_heads, kdim=0, vdim=0, dropout=0.0, bias=True,
                            add_bias_kv=False, add_zero_attn=False, kernel_initializer=None, name=None, *, causal=False):
        """Multi-head attention: query [N, Lq, E], key [N, Lk, kdim], value [N, Lk, vdim] -> [N, Lq, E].
        ``causal`` (a flexrt extension, keyword only): query i attends to keys 0..i."""
        w = "multihead_attention"
        attrs = MultiHeadAttentionAttrs(
            _check.integer(w, "embed_dim", embed_dim, 1), _check.integer(w, "num_heads", num_heads, 1),
            _check.integer(w, "kdim", kdim, 0), _check.integer(w, "vdim", vdim, 0),
            _check.number(w, "dropout", dropout, low=0.0, high=1.0, high_open=True), _check.flag(w, "bias", bias),
            _check.flag(w, "add_bias_kv", add_bias_kv), _check.flag(w, "add_zero_attn", add_zero_attn),
            _check.flag(w, "causal", causal))
        return self._add_layer(w, attrs, [query, key, value], name,
                               kernel_initializer=kernel_initializer).outputs[0]

    def lsh_self_attention(self, input, embed_dim, num_heads, n_buckets, n_hashes, chunk_size, causal=False, seed=0,
                           kernel_initializer=None, name=None):
        """Reformer's LSH self-attention with shared query/key projections: [N, L, E] -> [N, L, E].

        Each head hashes its vectors into ``n_buckets`` (1, or even) by random rotations drawn from
        ``seed``, ``n_hashes`` times; positions sorted by bucket attend within chunks of
        ``chunk_size`` and the previous chunk (``causal``: never to later positions). Weights:
        wqk, wv, wo [E, E], no biases. Semantics: ``flexrt.ir.ops.lsh_attention``.

        Example: ``ffmodel.lsh_self_attention(x, 512, 8, n_buckets=64, n_hashes=2, chunk_size=64)``.
        """
        w = "lsh_self_attention"
        attrs = LSHSelfAttentionAttrs(
            _check.integer(w, "embed_dim", embed_dim, 1), _check.integer(w, "num_heads", num_heads, 1),
            _check.integer(w, "n_buckets", n_buckets, 1), _check.integer(w, "n_hashes", n_hashes, 1),
            _check.integer(w, "chunk_size", chunk_size, 1), _check.flag(w, "causal", causal),
            _check.integer(w, "seed", seed, 0))
        return self._add_layer(w, attrs, [input], name, kernel_initializer=kernel_initializer).outputs[0]

    def batch_matmul(self, A, B, a_seq_length_dim=None, b_seq_length_dim=None, name=None):
        """[..., m, k] x [..., k, n] -> [..., m, n]."""
        w = "batch_matmul"
        for arg, v in (("a_seq_length_dim", a_seq_length_dim), ("b_seq_length_dim", b_seq_length_dim)):
            if v is not None:
                _check.integer(w, arg, v)
        attrs = BatchMatmulAttrs(a_seq_length_dim, b_seq_length_dim)
        return self._add_layer(w, attrs, [A, B], name).outputs[0]

    def lstm(self, input, hx, cx, hidden_size, shared_op=None, name=None):
        """One LSTM step: (x [N, in], h [N, hidden], c [N, hidden]) -> (h', c').

        Unrolled RNNs pass the first step's layer (or its output) as ``shared_op`` so that every
        step reads the same weights.
        """
        attrs = LSTMAttrs(_check.integer("lstm", "hidden_size", hidden_size, 1))
        layer = self._add_layer("lstm", attrs, [input, hx, cx], name, shared_op=shared_op)
        h, c = layer.outputs
        return h, c
