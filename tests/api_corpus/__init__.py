"""Attention kernels written to FlashAttention's, its varlen form's, FlexAttention's and a paged KV cache's APIs, right
and wrong, in the style of real CUDA and Triton ports: tiles of keys under an online softmax, explicit index arithmetic
for windows, packed offsets and page lookups. Each wrong kernel carries the bug its docstring names; the table of them
all, with their labels, is tests/api_mutants.py.
"""
