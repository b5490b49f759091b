"""Floor 2: modules built on the kernels -- attention layers, rotary positions, a probe and a tiny GPT."""

from .attention import SCALES, KVCache, MultiHeadAttention, resolve_scale
from .causal import CausalSelfAttention
from .gpt import GPT, GPTConfig
from .probe import ProbeResult, probe

__all__ = ["SCALES", "GPT", "CausalSelfAttention", "GPTConfig", "KVCache", "MultiHeadAttention", "ProbeResult",
           "probe", "resolve_scale"]
