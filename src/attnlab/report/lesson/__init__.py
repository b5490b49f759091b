"""The lesson page: one HTML file that works offline, built from results measured on this machine.

:func:`build` takes the :class:`attnlab.lesson.LessonData` that ``attnlab.lesson.collect``
gathered and writes a single file: the template ``page.html`` with the style sheet ``lesson.css``,
the script ``lesson.js``, every figure (as base64 PNG) and the walkthrough's numbers (as JSON)
written into it. Nothing is fetched when the page opens -- no fonts, no scripts, no images from
anywhere -- so it reads the same on a train as on a desk.
"""

from __future__ import annotations

import base64
import json
import re
import struct
from html import escape
from importlib import resources
from pathlib import Path

from attnlab.lesson import heads
from attnlab.results import to_dict

from . import checklist, copying, figures, levels, sections, teach


def _asset(name: str) -> str:
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


def _data_uri(png: bytes) -> dict:
    """The PNG as a data address, with the CSS size it is shown at (it is drawn at figures.SHARPNESS times that)."""
    w, h = struct.unpack(">II", png[16:24])  # the IHDR chunk: width and height in image pixels
    return {"src": "data:image/png;base64," + base64.b64encode(png).decode("ascii"),
            "width": round(w / figures.SHARPNESS), "height": round(h / figures.SHARPNESS)}


def images(data) -> dict[str, dict]:
    """Every figure, drawn from its part's result at the page's size (see :mod:`.figures`)."""
    demo, scale, tie = data.demo.result, data.train_scale.result, data.train_tie_kv.result
    imgs = {"demo_map": _data_uri(figures.demo_map(demo)), "demo_scale": _data_uri(figures.demo_scale(demo)),
            "bench": _data_uri(figures.bench(data.bench.result))}
    if scale:
        imgs["train"] = _data_uri(figures.train(scale))
    if tie:
        imgs["tie_kv"] = _data_uri(figures.train(tie))
    for name, part in data.explore.items():
        if part.result is None:  # not measured (a training experiment under --quick)
            continue
        imgs[f"explore-{name}"] = _data_uri(figures.explore(name, part.result))
    return imgs


def _script_json(obj) -> str:
    """JSON that is safe inside <script>: no '</' can close the element early."""
    return json.dumps(obj, separators=(",", ":")).replace("</", "<\\/")


def footer(data) -> str:
    """What the page's results came from, in a sentence: the parts measured while it was built, small (with the
    commands that replace them), or none."""
    parts = [(p.name, p) for p in (data.demo, data.bench, data.train_scale, data.train_tie_kv)]
    parts += [(f"explore {name}", p) for name, p in data.explore.items()]
    quick = [name for name, p in parts if p is not None and p.origin != "file"]
    if not quick:
        return "Every result on it was read from the output folder, as the commands wrote them; rebuild it after " \
               "rerunning one to update the page."
    said = escape(", ".join(quick))
    return (f"Not from the output folder, so measured small while it was built, or not at all: {said}. Run "
            "<code>attnlab lesson --build</code> (or those commands) and rebuild it for the full measurements.")


def render(data) -> str:
    """The whole page as one string."""
    imgs = images(data)
    m = data.machine
    where = (f"{m.get('cpu', '?')}, {m.get('cpu_count', '?')} cores, torch {data.versions.get('torch', '?')}, "
             f"attnlab {data.versions.get('attnlab', '?')}")
    fill = {
        "css": _asset("lesson.css"),
        "js": _asset("lesson.js"),
        "copy_js": _asset("copy.js"),
        "page_js": _asset("page.js"),
        "model_js": _asset("model.js"),
        "data": _script_json({"walk": {"text": data.walkthrough.text, "query": data.walkthrough.query,
                                       "source": data.walkthrough.source},
                              "model": to_dict(data.model), "code": to_dict(data.code),
                              "circuits": to_dict(data.circuits) if data.circuits else None,
                              "heads": {"pattern_share": heads.PATTERN_SHARE, "word_share": heads.WORD_SHARE}}),
        "created": escape(data.created),
        "where": escape(where),
        "quick_note": ('<p class="source quick-run"><strong>built with --quick</strong> — results that were not in the '
                       'output folder were measured small and fast, or not at all; each part says which.</p>'
                       if data.quick else ""),
        "walk_label": escape(data.walkthrough.label),
        "walk_kind": "checkpoint" if data.walkthrough.source == "trained" else "seeded",
        "block_size": str(data.model.config["block_size"]),
        "plain": teach.plain_words(),
        "worked": teach.worked(data.worked),
        "several": teach.several_heads(data.model.config, len(data.walkthrough.tokens)),
        "code_blocks": teach.code_blocks(data.code),
        "heads_intro": teach.heads_intro(),
        "copy_intro": copying.intro(data.circuits, data.walkthrough.source),
        "checklist": checklist.checklist(data) + levels.path(data),
        "reading": teach.reading(),
        "footer": footer(data),
        "demo": sections.demo(data.demo, imgs),
        "bench": sections.bench(data.bench, imgs),
        "train": sections.train(data.train_scale, data.train_tie_kv, imgs),
        "explore": sections.explore(data.explore, imgs),
        "questions": sections.questions(data),
        "hard": sections.hard(data),
        "test": sections.test(),
        "n_questions": str(len(sections.QUIZ)),
        "pass_mark": str(round(0.6 * len(sections.QUIZ))),
    }
    return _fill(_asset("page.html"), fill)


def _fill(page: str, fill: dict[str, str]) -> str:
    """The template with every {{name}} replaced; the template and ``fill`` must name the same things.
    Every page starts with ``{{head}}``: ``head.html``, the one home of the pages' content-security policy."""
    fill = {"head": _asset("head.html").rstrip("\n"), **fill}
    wanted = set(re.findall(r"\{\{(\w+)\}\}", page))
    if wanted != set(fill):
        raise RuntimeError(f"a page template and its builder disagree: template wants {sorted(wanted - set(fill))}, "
                           f"builder fills {sorted(set(fill) - wanted)} unused")
    return re.sub(r"\{\{(\w+)\}\}", lambda mt: fill[mt.group(1)], page)


def build(data, path: str | Path) -> Path:
    """Write the page to ``path`` (atomically) and return the path."""
    return _write(render(data), path)


def _write(page: str, path: str | Path) -> Path:
    from attnlab.results.files import write_text

    return write_text(path, page)
