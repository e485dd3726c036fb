"""The network of the learned fused-operator cost model (DisCo §4.3), forward and backward by hand in NumPy.

A batch is ``X`` [B, M, F] (member features, padded to M members), ``adj`` [B, M, M] (bool: i attends to
j; self loops; a padded member attends to itself only) and ``mask`` [B, M] (1 for a real member). The
network:

- ``depth`` multi-head graph attention layers (Eq. 1, GAT-style coefficients): per head k,
  ``H = E W_k``, ``γ_ij = softmax_j∈N(i) LeakyReLU(a_k·H_i + b_k·H_j)``, ``e_i = ELU(Σ_j γ_ij H_j + c_k)``,
  the heads' outputs concatenated;
- a summed embedding over the real members (Eq. 2): ``y = ELU((Σ_i e_i) W_r + b_r)``;
- three dense layers (ReLU between) to one output.

Entry points: ``init_params``, ``forward``, ``backward``, ``Adam``. Everything is float64 and
deterministic for a seed; ``forward`` returns a cache that ``backward`` reads.
"""

from __future__ import annotations

import numpy as np

LEAK = 0.2            # LeakyReLU slope of the attention scores (GAT's)
NEG = -1e30           # score of a pair that is not an edge: its softmax weight is 0


def _glorot(rng: np.random.Generator, shape: tuple, fan_in: int, fan_out: int) -> np.ndarray:
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=shape)


def init_params(num_features: int, depth: int, heads: int, width: int, seed: int) -> dict[str, np.ndarray]:
    """Glorot-uniform weights, zero biases, for ``depth`` attention layers of ``heads`` heads whose
    concatenated output is ``width`` wide (``width`` must divide by ``heads``)."""
    rng = np.random.default_rng(seed)
    dh = width // heads
    p: dict[str, np.ndarray] = {}
    d_in = num_features
    for layer in range(depth):
        p[f"gat{layer}.W"] = _glorot(rng, (heads, d_in, dh), d_in, dh)
        p[f"gat{layer}.a_src"] = _glorot(rng, (heads, dh), dh, 1)
        p[f"gat{layer}.a_dst"] = _glorot(rng, (heads, dh), dh, 1)
        p[f"gat{layer}.bias"] = np.zeros((heads, dh))
        d_in = heads * dh
    p["readout.W"] = _glorot(rng, (d_in, width), d_in, width)
    p["readout.b"] = np.zeros(width)
    for i, (a, b) in enumerate(((width, width), (width, width), (width, 1))):
        p[f"dense{i}.W"] = _glorot(rng, (a, b), a, b)
        p[f"dense{i}.b"] = np.zeros(b)
    return p


def depth_of(params: dict) -> int:
    return sum(1 for k in params if k.endswith(".a_src"))


def _elu(z: np.ndarray) -> np.ndarray:
    return np.where(z > 0, z, np.expm1(np.minimum(z, 0)))


def _elu_grad(z: np.ndarray) -> np.ndarray:
    return np.where(z > 0, 1.0, np.exp(np.minimum(z, 0)))


def _gat_forward(p: dict, layer: int, E: np.ndarray, adj: np.ndarray):
    """One attention layer: [B, M, D] -> [B, M, K*dh], and what its backward needs."""
    W, a_s, a_d, bias = (p[f"gat{layer}.{n}"] for n in ("W", "a_src", "a_dst", "bias"))
    H = np.einsum("bmd,kdh->bkmh", E, W)
    f = np.einsum("bkmh,kh->bkm", H, a_s)
    g = np.einsum("bkmh,kh->bkm", H, a_d)
    S = f[..., :, None] + g[..., None, :]
    L = np.where(adj[:, None], np.where(S > 0, S, LEAK * S), NEG)
    L = L - L.max(axis=-1, keepdims=True)
    P = np.exp(L)
    P /= P.sum(axis=-1, keepdims=True)
    Z = np.einsum("bkij,bkjh->bkih", P, H) + bias[None, :, None, :]
    O = _elu(Z)
    B, K, M, dh = O.shape
    return O.transpose(0, 2, 1, 3).reshape(B, M, K * dh), (E, H, S, P, Z)


def _gat_backward(p: dict, layer: int, cache, d_out: np.ndarray, grads: dict) -> np.ndarray:
    """Gradients of one attention layer's weights (into ``grads``); returns d(loss)/d(input)."""
    W, a_s, a_d = (p[f"gat{layer}.{n}"] for n in ("W", "a_src", "a_dst"))
    E, H, S, P, Z = cache
    B, K, M, dh = Z.shape
    dZ = d_out.reshape(B, M, K, dh).transpose(0, 2, 1, 3) * _elu_grad(Z)
    grads[f"gat{layer}.bias"] = dZ.sum(axis=(0, 2))
    dP = np.einsum("bkih,bkjh->bkij", dZ, H)
    dH = np.einsum("bkij,bkih->bkjh", P, dZ)
    dL = P * (dP - (dP * P).sum(axis=-1, keepdims=True))   # softmax; non-edges have P = 0
    dS = dL * np.where(S > 0, 1.0, LEAK)
    df, dg = dS.sum(axis=-1), dS.sum(axis=-2)
    dH += df[..., None] * a_s[None, :, None, :] + dg[..., None] * a_d[None, :, None, :]
    grads[f"gat{layer}.a_src"] = np.einsum("bkm,bkmh->kh", df, H)
    grads[f"gat{layer}.a_dst"] = np.einsum("bkm,bkmh->kh", dg, H)
    grads[f"gat{layer}.W"] = np.einsum("bmd,bkmh->kdh", E, dH)
    return np.einsum("bkmh,kdh->bmd", dH, W)


def forward(params: dict, X: np.ndarray, adj: np.ndarray, mask: np.ndarray):
    """The network's output per graph, [B], and the cache ``backward`` takes."""
    E, layers = X, []
    for layer in range(depth_of(params)):
        E, c = _gat_forward(params, layer, E, adj)
        layers.append(c)
    pooled = np.einsum("bm,bmd->bd", mask, E)                       # Eq. 2: sum over the members
    r = pooled @ params["readout.W"] + params["readout.b"]
    h = _elu(r)
    dense = []
    for i in range(3):
        z = h @ params[f"dense{i}.W"] + params[f"dense{i}.b"]
        dense.append((h, z))
        h = np.maximum(z, 0.0) if i < 2 else z
    return h[:, 0], (layers, mask, pooled, r, dense)


def backward(params: dict, cache, d_out: np.ndarray) -> dict[str, np.ndarray]:
    """Gradients of every parameter given d(loss)/d(output) [B]."""
    layers, mask, pooled, r, dense = cache
    grads: dict[str, np.ndarray] = {}
    d = d_out[:, None]
    for i in (2, 1, 0):
        h_in, z = dense[i]
        if i < 2:
            d = d * (z > 0)
        grads[f"dense{i}.W"] = h_in.T @ d
        grads[f"dense{i}.b"] = d.sum(axis=0)
        d = d @ params[f"dense{i}.W"].T
    d = d * _elu_grad(r)
    grads["readout.W"] = pooled.T @ d
    grads["readout.b"] = d.sum(axis=0)
    dE = mask[:, :, None] * (d @ params["readout.W"].T)[:, None, :]
    for layer in reversed(range(len(layers))):
        dE = _gat_backward(params, layer, layers[layer], dE, grads)
    return grads


class Adam:
    """Adam (Kingma & Ba) over a parameter dict, updated in place."""

    def __init__(self, params: dict, lr: float = 3e-3, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8):
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, params: dict, grads: dict) -> None:
        self.t += 1
        c1, c2 = 1 - self.beta1 ** self.t, 1 - self.beta2 ** self.t
        for k, g in grads.items():
            self.m[k] = self.beta1 * self.m[k] + (1 - self.beta1) * g
            self.v[k] = self.beta2 * self.v[k] + (1 - self.beta2) * g * g
            params[k] -= self.lr * (self.m[k] / c1) / (np.sqrt(self.v[k] / c2) + self.eps)
