"""Whether Triton runs its kernels on this CPU: its interpreter, switched on by ``TRITON_INTERPRET``.

Triton reads the variable when a kernel is *defined*, so for a process the answer is fixed the first
time the triton form's kernels are imported (:mod:`attnlab.kernels.triton_kernels`). The form and
the registry ask here, and nothing here imports Triton: ``import attnlab`` never does.
"""

from __future__ import annotations

import os


def interpreting() -> bool:
    """True when Triton will run kernels in its CPU interpreter (TRITON_INTERPRET, read as Triton reads it)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on")
