"""The judge's room apart: someone else's function run in a child process, so that the judged code never shares a
process with the judge.

A function under test may exit, crash, hang, or patch PyTorch and attnlab when its module is imported; what it
can reach is its own process, never the one that holds the oracle, the rule and the verdict. This room holds
that machinery, one module a job:

* :mod:`.loader` -- loading the function once, from its source, in the process that will run it;
* :mod:`.wire` -- the wire protocol: a header of plain values and tensors, nothing else;
* :mod:`.remote` -- the judged process seen by the judge as a function it can call, and how it ended;
* :mod:`.worker` -- the judged process's loop (``python -m attnlab.judge.apart.worker``): load, then answer;
* :mod:`.served` -- serving: a request run on the real function, and the values sent back;
* :mod:`.watchdog` -- a time limit for one case, so a hang is a FAIL row and not a stuck run;
* :mod:`.isolate` -- the two ways in: ``attnlab verify --impl`` (:func:`.isolate.verify_elsewhere`) and
  :mod:`attnlab.testing` (:func:`.isolate.judge_apart`, the judge itself in a fresh process).

Nothing is imported here: the judged process starts with as little of attnlab as it needs.
"""
