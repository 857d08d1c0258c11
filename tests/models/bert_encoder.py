"""A BERT-style encoder with MiniLM-L6's shape (6 layers, hidden 384, 12 heads of 32, FFN
1536, vocabulary 30522), written node for node as PyTorch exports Hugging Face's BertModel
at opset 17. The sequence length is a symbolic dim ("sequence"): one model serves every length.

embeddings: Gather(word) + Gather(position, Slice of position_ids) + Gather(token type)
            -> LayerNormalization
mask:       Unsqueeze(attention_mask) -> Cast -> (1 - m) * float32 min, added to the scores
per layer:  Q, K, V = MatMul + Add; Reshape to heads, Transpose (K straight to (b,h,d,s));
            MatMul(Q, K^T) / sqrt(32) + mask -> Softmax -> MatMul(., V) -> Transpose ->
            Reshape; output MatMul + Add + residual -> LayerNormalization; FFN MatMul + Add ->
            GELU in its Erf form (x * 0.5 * (1 + erf(x / sqrt 2))) -> MatMul + Add + residual
            -> LayerNormalization
output:     last_hidden_state (1, sequence, 384)
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from .graph_builder import GraphBuilder

LAYERS, HIDDEN, HEADS, FFN, VOCAB, MAX_POSITIONS = 6, 384, 12, 1536, 30522, 512
HEAD = HIDDEN // HEADS


class _Bert(GraphBuilder):
    def layer_norm(self, x: str, out: str | None = None) -> str:
        gamma = self.f32(self.rng.uniform(0.8, 1.2, HIDDEN), "ln_gamma")
        beta = self.f32(self.rng.normal(0.0, 0.05, HIDDEN), "ln_beta")
        return self.node("LayerNormalization", [x, gamma, beta], out=out, axis=-1,
                         epsilon=1e-12)

    def embeddings(self, ids: str) -> str:
        seq = self.node("Unsqueeze", [self.node("Gather", [self.node("Shape", [ids]),
                                                          self.ints(1, "one")], axis=0),
                                      self.ints([0], "axes")])
        def sliced(buffer):
            return self.node("Slice", [self.ints(buffer, "buffer"), self.ints([0], "starts"),
                                       seq, self.ints([1], "axes")])
        positions = sliced(np.arange(MAX_POSITIONS)[None])
        types = sliced(np.zeros((1, MAX_POSITIONS)))
        tables = [(VOCAB, ids), (MAX_POSITIONS, positions), (2, types)]
        x = None
        for rows, index in tables:
            table = self.f32(self.rng.normal(0.0, 0.5, (rows, HIDDEN)), "embedding")
            e = self.node("Gather", [table, index], axis=0)
            x = e if x is None else self.node("Add", [x, e])
        return self.layer_norm(x)

    def additive_mask(self, mask: str) -> str:
        m = self.node("Cast", [self.node("Unsqueeze", [mask, self.ints([1, 2], "axes")])],
                      to=TensorProto.FLOAT)
        inverted = self.node("Sub", [self.f32(1.0, "one"), m])
        return self.node("Mul", [inverted, self.f32(np.finfo(np.float32).min, "min")])

    def heads(self, x: str, perm: list[int]) -> str:
        split = self.node("Reshape", [x, self.ints([0, -1, HEADS, HEAD])])
        return self.node("Transpose", [split], perm=perm)

    def attention(self, x: str, mask: str) -> str:
        q = self.heads(self.matmul_bias(x, HIDDEN, HIDDEN), [0, 2, 1, 3])
        k = self.heads(self.matmul_bias(x, HIDDEN, HIDDEN), [0, 2, 3, 1])
        v = self.heads(self.matmul_bias(x, HIDDEN, HIDDEN), [0, 2, 1, 3])
        scores = self.node("Div", [self.node("MatMul", [q, k]), self.f32(HEAD ** 0.5, "scale")])
        probs = self.node("Softmax", [self.node("Add", [scores, mask])], axis=-1)
        context = self.node("Transpose", [self.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        context = self.node("Reshape", [context, self.ints([0, -1, HIDDEN])])
        return self.matmul_bias(context, HIDDEN, HIDDEN)

    def gelu(self, x: str) -> str:
        erf = self.node("Erf", [self.node("Div", [x, self.f32(2.0 ** 0.5, "sqrt2")])])
        y = self.node("Mul", [x, self.node("Add", [erf, self.f32(1.0, "one")])])
        return self.node("Mul", [y, self.f32(0.5, "half")])

    def layer(self, x: str, mask: str, out: str | None = None) -> str:
        x = self.layer_norm(self.node("Add", [self.attention(x, mask), x]))
        h = self.gelu(self.matmul_bias(x, HIDDEN, FFN, 2.0 ** 0.5))
        return self.layer_norm(self.node("Add", [self.matmul_bias(h, FFN, HIDDEN), x]), out)


def build(seed: int = 6):
    b = _Bert(seed)
    x, mask = b.embeddings("input_ids"), b.additive_mask("attention_mask")
    for k in range(LAYERS):
        x = b.layer(x, mask, out="last_hidden_state" if k == LAYERS - 1 else None)
    io = [("input_ids", TensorProto.INT64, [1, "sequence"]),
          ("attention_mask", TensorProto.INT64, [1, "sequence"])]
    return b.model("bert_minilm_like", io,
                   [("last_hidden_state", TensorProto.FLOAT, [1, "sequence", HIDDEN])])
