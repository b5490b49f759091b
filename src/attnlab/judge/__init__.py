"""The judge: anyone's attention held to a float64 oracle, forward and backward, and told what is wrong.

What ``attnlab verify`` and :mod:`attnlab.testing` sit on: the oracle (:mod:`.oracle`, its own short float64
reference that shares nothing with the forms), the grid of cases (:mod:`.cases`), the one tolerance rule
(:mod:`.rule`), the judge of one case (:mod:`.judge`), the wrong semantics a failure is held against and the causes
they name (:mod:`.hypotheses`, :mod:`.diagnose`), the APIs other than SDPA's (:mod:`.apis`), other people's code in
a process of its own (:mod:`.isolate`, :mod:`.remote`, :mod:`.worker`), and checks inside real models
(:mod:`.hf_check`)."""
