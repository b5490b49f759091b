"""Measuring attention: time, peak memory, FLOPs, growth exponents, and compiled FlexAttention as a
competitor."""
