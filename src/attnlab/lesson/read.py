"""Reading a command's JSON back through its result class, so a wrong file is named with the wrong field.

``attnlab lesson`` reads what ``demo``, ``bench`` and ``train`` wrote. A file from another version,
edited by hand or cut short should not surface as a KeyError deep inside the page builder: the
result class's ``from_dict`` checks each field against its annotations (:mod:`attnlab.results`),
and the first that does not fit is reported as ``bench.json: results[3].seq should be an integer,
got "x"``.
"""

from __future__ import annotations

from pathlib import Path

from attnlab.results import BadField


def result(cls, data, path: Path, command: str):
    """``data`` read from ``path`` as a ``cls``; ValueError naming the file, the field and the command to rerun."""
    try:
        return cls.from_dict(data)
    except BadField as e:
        raise ValueError(f"{path}: {e}, so it is not a result of `{command}`; run it again or remove the "
                         "file") from None
