"""Attention across processes: the local launcher, ring attention, data and context parallel training, the
memory and time budget of a run, torchrun."""
