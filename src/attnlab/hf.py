"""Hugging Face transformers adapter (re-exported from :mod:`attnlab.nn.hf`); needs ``pip install 'attnlab[hf]'``."""

from .nn.hf import MissingExtra, attention_forward, impl_name, names, register

__all__ = ["MissingExtra", "attention_forward", "impl_name", "names", "register"]
