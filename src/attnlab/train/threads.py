"""How many threads a training step should use, decided by the run's own steps as it goes.

On a machine others share, more threads can be slower: at load 8 a step took 5.0 s with 2 threads
and 0.9 s with 1, because the threads wait on each other while the cores are busy elsewhere. And
the load moves during a run. So a :class:`Picker` takes the run's real steps as the measurement:
at the start of every log interval one step runs at each other thread count (two of each at the
very start), and the rest of the interval runs at whichever was faster, against the median of the
chosen count's recent steps. No step is wasted -- the trial steps are training steps -- and the run
follows the load. Every choice is kept with the times it was made from (:attr:`Picker.choices`).
"""

from __future__ import annotations

import statistics

import torch


class Picker:
    def __init__(self, counts=(1, 2), every: int = 100):
        import os

        self.counts = [c for c in counts if c <= (os.cpu_count() or 1)] or [1]
        self.every, self.current = max(1, every), self.counts[0]
        self.times: dict[int, list[float]] = {c: [] for c in self.counts}
        self.trials: list[int] = []  # the counts still to try in this interval
        self.choices: list[dict] = []  # {"step", "threads", "step_s": {count: seconds}}

    def before(self, step: int) -> None:
        """Set torch's thread count for ``step``."""
        if len(self.counts) > 1 and step % self.every == 0:
            others = [c for c in self.counts if c != self.current]
            self.trials = (self.counts * 2) if not self.choices else others
            for c in self.trials:  # measured afresh: an old time of a count not in use says nothing of the load now
                self.times[c] = []
        count = self.trials[0] if self.trials else self.current
        if torch.get_num_threads() != count:
            torch.set_num_threads(count)
        self._count = count

    def after(self, step: int, seconds: float) -> None:
        """Record ``step``'s time; after the interval's trials, choose."""
        self.times[self._count] = (self.times[self._count] + [seconds])[-5:]  # recent steps only: the load moves
        if not self.trials:
            return
        self.trials.pop(0)
        if not self.trials:
            step_s = {c: statistics.median(t) for c, t in self.times.items() if t}
            self.current = min(step_s, key=step_s.get)
            self.choices.append({"step": step, "threads": self.current,
                                 "step_s": {str(c): round(s, 4) for c, s in step_s.items()}})
