"""A tiny GPT: a decoder-only transformer small enough to train on a laptop CPU in minutes.

    idx (B, T) -> token embedding (+ position embedding, unless RoPE) -> x (B, T, C)
    n_layer blocks, each pre-norm:  x = x + attn(ln_1(x));  x = x + mlp(ln_2(x))
    ln_f(x) @ wte^T -> logits (B, T, V)      # the output layer reuses the token embedding (tied)

After Radford et al., "Language Models are Unsupervised Multitask Learners" (GPT-2, 2019), and
Karpathy's nanoGPT. Configured by a frozen :class:`GPTConfig`; change it with
``dataclasses.replace(cfg, n_layer=4)``.

**Initialisation** (it decides whether the 1/sqrt(d) ablation shows anything):

* every linear weight ~ N(0, 1/fan_in) ("LeCun normal"), which keeps a unit-variance input at unit
  variance. The input of each attention layer comes out of a LayerNorm (variance 1 per feature),
  so every component of q and k starts with variance about 1 -- the lesson's premise. An
  unscaled score q . k over d features then has variance d: at d = 64 the scores spread over
  +-8 and the softmax starts saturated. (GPT-2's fixed std 0.02 would make q and k tiny at this
  width, every softmax nearly uniform, and the ablation would show nothing at the start.)
* the two projections that write into the residual stream (attention's output and the MLP's
  second layer) are scaled down by a further 1/sqrt(2 n_layer), as in GPT-2, so the stream does
  not grow with depth;
* token and position embeddings ~ N(0, 1/C): with the tied output layer each logit starts with
  variance about 1, so the first loss is close to log(vocab_size);
* biases 0, LayerNorm gain 1;
* attention sinks (``sinks=True``), one logit per head and layer, 0 (:mod:`attnlab.nn.attention` says why).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.kernels.argcheck import nonneg_int, positive_int, positive_real, real_in_range

from .attention import KVCache, MultiHeadAttention, resolve_scale
from .shard import SeqShard


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 128
    block_size: int = 128  # the longest context the model is trained on
    n_layer: int = 2
    n_head: int = 2
    n_kv_head: int | None = None  # None: as many as n_head; fewer: grouped-query attention
    d_model: int = 128
    mlp_ratio: int = 4
    dropout: float = 0.0
    bias: bool = True
    position: str = "learned"  # "learned": a position embedding table; "rope": rotary, in attention
    scale: str | float = "sqrt"  # "sqrt" (1/sqrt(d)), "none" (1), "inv" (1/d) or a number
    tie_kv: bool = False  # the value projection is the key projection
    impl: str = "sdpa"  # the form of attention (attnlab.forms())
    sinks: bool = False  # gpt-oss's attention sinks: one learnable logit per head and layer (a form that takes them)

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "d_model", "mlp_ratio"):
            positive_int(f"GPTConfig.{name}", getattr(self, name))
        if self.d_model % self.n_head:
            raise ValueError(f"GPTConfig.d_model={self.d_model} is not divisible by n_head={self.n_head}")
        if self.position not in ("learned", "rope"):
            raise ValueError(f"GPTConfig.position must be 'learned' or 'rope', got {self.position!r}")
        real_in_range("GPTConfig.dropout", self.dropout, 0, 1, high_open=True, what="in [0, 1)")
        resolve_scale(self.scale, self.head_dim)
        if not isinstance(self.sinks, bool):
            raise TypeError(f"GPTConfig.sinks must be True or False, got {self.sinks!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    def to_dict(self) -> dict:
        return asdict(self)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model, bias=cfg.bias)
        self.proj = nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x):  # (B, T, C) -> (B, T, C)
        return self.drop(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    """Pre-norm: each sub-layer sees a normalised copy of the stream and adds its answer back."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.attn = MultiHeadAttention(cfg.d_model, cfg.n_head, cfg.n_kv_head, cfg.dropout,
                                       rope=cfg.position == "rope", tie_kv=cfg.tie_kv, bias=cfg.bias,
                                       impl=cfg.impl, scale=cfg.scale, sinks=cfg.sinks)
        self.ln_2 = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x, cache: KVCache | None = None, shard: SeqShard | None = None):  # (B, T, C) -> (B, T, C)
        x = x + self.attn(self.ln_1(x), cache, shard)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        if not isinstance(cfg, GPTConfig):
            raise TypeError(f"cfg must be a GPTConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.block_size, cfg.d_model) if cfg.position == "learned" else None
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """The initialisation described in the module docstring; uses torch's global generator."""
        C = self.cfg.d_model
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=1.0 / math.sqrt(module.in_features))
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=1.0 / math.sqrt(C))
        for block in self.blocks:
            for residual_out in (block.attn.proj, block.mlp.proj):
                residual_out.weight.mul_(1.0 / math.sqrt(2 * self.cfg.n_layer))
            if block.attn.sinks is not None:
                nn.init.zeros_(block.attn.sinks)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def new_cache(self) -> list[KVCache]:
        """One empty KV cache per layer, for :meth:`forward` (``caches=``) and :meth:`generate`."""
        return [KVCache() for _ in self.blocks]

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None,
                caches: list[KVCache] | None = None, *, shard: SeqShard | None = None):
        """idx (B, T) -> (logits (B, T, V), mean cross-entropy against ``targets`` (B, T) or None).

        ``shard``: idx holds one rank's tokens of each sequence (context parallel, see
        :mod:`attnlab.nn.shard`); the loss is then the mean over this rank's tokens.
        """
        if not isinstance(idx, torch.Tensor) or idx.dim() != 2 or idx.is_floating_point():
            raise ValueError("idx must be an integer tensor of shape (B, T)")
        B, T = idx.shape
        past = len(caches[0]) if caches else 0
        if caches is not None and len(caches) != len(self.blocks):
            raise ValueError(f"caches has {len(caches)} entries but the model has {len(self.blocks)} layers")
        if shard is not None:
            if shard.positions.shape != (T,):
                raise ValueError(f"shard has {len(shard.positions)} positions but idx holds {T} tokens per sequence")
            pos = shard.positions.to(idx.device)
        else:
            pos = torch.arange(past, past + T, device=idx.device)
        if T and int(pos.max()) >= self.cfg.block_size:
            raise ValueError(f"sequence of {int(pos.max()) + 1} tokens is longer than block_size={self.cfg.block_size}")
        x = self.wte(idx)  # (B, T, C)
        if self.wpe is not None:
            x = x + self.wpe(pos)  # (T, C) broadcast over B
        x = self.drop(x)
        for i, block in enumerate(self.blocks):
            x = block(x, caches[i] if caches is not None else None, shard)
        logits = self.ln_f(x) @ self.wte.weight.T  # (B, T, V): the tied output layer
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))
        return logits, loss

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                 generator: torch.Generator | None = None, on_token=None) -> torch.Tensor:
        """Continue ``idx`` (B, T) by ``max_new_tokens`` sampled tokens through the KV cache.

        The prompt is run once (prefill), then each new token is one query against the cache.
        When the context reaches ``block_size`` the cache is rebuilt from the last half-block.
        ``on_token(next)``, if given, gets each new (B, 1) token as soon as it is drawn.
        """
        nonneg_int("max_new_tokens", max_new_tokens)
        positive_real("temperature", temperature, "a finite number > 0")
        if top_k is not None:
            positive_int("top_k", top_k, "a positive integer or None")
        was_training = self.training
        self.eval()
        T = idx.shape[1]
        out = idx.new_empty(idx.shape[0], T + max_new_tokens)  # (B, T + new): filled in place, never re-copied
        out[:, :T] = idx
        caches, step_in = self.new_cache(), idx[:, -self.cfg.block_size:]
        for t in range(T, T + max_new_tokens):
            if len(caches[0]) + step_in.shape[1] > self.cfg.block_size:  # context full: re-prefill
                caches, step_in = self.new_cache(), out[:, max(0, t - (self.cfg.block_size // 2 or 1)):t]
            logits, _ = self(step_in, caches=caches)
            logits = logits[:, -1, :]  # (B, V)
            # shifted to a maximum of 0 and divided in float64: a tiny temperature (1e-320, which float32 reads as
            # 0) cannot make inf or NaN; it sends every other logit to -inf: greedy decoding, its limit
            logits = (logits - logits.amax(dim=-1, keepdim=True)).double() / temperature
            if top_k is not None:
                kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            nxt = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)  # (B, 1)
            out[:, t:t + 1] = nxt
            step_in = nxt
            if on_token is not None:
                on_token(nxt)
        self.train(was_training)
        return out
