"""The learner's lab: attention you write yourself, graded by the judge and measured on this machine.

``attnlab lab start`` copies :mod:`.starter` (``attention_by_hand`` with four TODOs; the later levels'
starters are in :mod:`.levels`) into a folder, never over a file already there; ``attnlab lab check FILE[:FUNCTION]``
loads the learner's function, grades it with verify's rule on the cases such a function can answer
(:mod:`.grade`), measures its time and peak memory against length (:mod:`.measure`) and writes the
result (:mod:`.result`) as JSON, which the lesson page reads to tick the lab's checklist.
"""
