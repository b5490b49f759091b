"""Character-level text that exists on every machine, with no download.

By default the corpus is the source code of Python's own standard library (found with
``sysconfig.get_paths()["stdlib"]``; test suites and site-packages left out). It is split into
training and validation *by file* -- a file is held out when the CRC-32 of its relative path is 0
mod 10 -- so the validation loss measures text the model has never seen, not a neighbouring line
of the same file. Files are taken in the order of that hash until ``max_chars`` is reached, so the
same Python gives the same corpus on every machine.

``from_file(path)`` reads any text file instead and holds out its last tenth.

Tokens are characters: the ``max_vocab`` most frequent ones (ties broken by code point), and one
unknown symbol for the rare rest when there is any.
"""

from __future__ import annotations

import os
import sysconfig
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import torch

from attnlab._extras import require
from attnlab.kernels.argcheck import int_at_least

np = require("numpy")

UNKNOWN = "\ufffd"
_SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}


@dataclass(frozen=True)
class Corpus:
    name: str
    chars: tuple[str, ...]  # the vocabulary: token id -> character
    train: torch.Tensor = field(repr=False)  # (N_train,) int64 token ids
    val: torch.Tensor = field(repr=False)  # (N_val,) int64
    files: tuple[int, int] = (1, 1)  # (training files, validation files)

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        """Characters -> ids; a character outside the vocabulary is the unknown symbol, or a ValueError."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        index = {c: i for i, c in enumerate(self.chars)}
        unk = index.get(UNKNOWN)
        missing = sorted({c for c in text if c not in index})
        if missing and unk is None:
            raise ValueError(f"text has characters outside the vocabulary: {''.join(missing)!r}")
        return torch.tensor([index.get(c, unk) for c in text], dtype=torch.int64)

    def decode(self, ids) -> str:
        return "".join(self.chars[int(i)] for i in ids)

    def describe(self) -> dict:
        return {"name": self.name, "vocab_size": self.vocab_size, "train_chars": int(self.train.numel()),
                "val_chars": int(self.val.numel()), "train_files": self.files[0], "val_files": self.files[1]}


def _codepoints(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)


def build(name: str, train_text: str, val_text: str, max_vocab: int = 256, files=(1, 1)) -> Corpus:
    """Choose the vocabulary from both splits and encode them."""
    int_at_least("max_vocab", max_vocab, 2)
    tr, va = _codepoints(train_text), _codepoints(val_text)
    cps, counts = np.unique(np.concatenate([tr, va]), return_counts=True)
    order = np.lexsort((cps, -counts))  # most frequent first, then by code point
    kept = cps[order]
    if len(kept) > max_vocab:
        kept = kept[: max_vocab - 1]
    kept = np.sort(kept)
    chars = [chr(c) for c in kept]
    unk = None
    if len(kept) < len(cps):
        chars.append(UNKNOWN)
        unk = len(chars) - 1

    def encode(a: np.ndarray) -> torch.Tensor:
        pos = np.searchsorted(kept, a).clip(0, len(kept) - 1)
        ids = np.where(kept[pos] == a, pos, unk if unk is not None else 0)
        return torch.from_numpy(ids.astype(np.int64))

    return Corpus(name=name, chars=tuple(chars), train=encode(tr), val=encode(va), files=tuple(files))


def stdlib_files(root: str | Path | None = None) -> list[tuple[str, Path]]:
    """(relative path, path) of every ``.py`` file of the standard library, tests excluded, sorted."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    if not root.is_dir():
        raise ValueError(f"standard library folder {root} does not exist; pass --corpus PATH instead")
    out = []
    for here, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for n in names:
            if n.endswith(".py"):
                p = Path(here) / n
                out.append((p.relative_to(root).as_posix(), p))
    return sorted(out)


def stdlib(max_chars: int = 4_000_000, max_vocab: int = 256, root: str | Path | None = None) -> Corpus:
    """The standard library's source: about 90% of ``max_chars`` for training, 10% for validation."""
    int_at_least("max_chars", max_chars, 1000)
    files = sorted(stdlib_files(root), key=lambda rp: (zlib.crc32(rp[0].encode()), rp[0]))
    budget = {"train": max_chars - max_chars // 10, "val": max_chars // 10}
    parts: dict[str, list[str]] = {"train": [], "val": []}
    size = {"train": 0, "val": 0}
    for rel, path in files:
        split = "val" if zlib.crc32(rel.encode()) % 10 == 0 else "train"
        if size[split] >= budget[split]:
            if all(size[s] >= budget[s] for s in size):
                break
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        parts[split].append(text)
        size[split] += len(text)
    if not parts["train"] or not parts["val"]:
        raise ValueError("the standard library gave no training or no validation files; pass --corpus PATH")
    name = f"python{sysconfig.get_python_version()} stdlib"
    return build(name, "\n".join(parts["train"]), "\n".join(parts["val"]), max_vocab,
                 files=(len(parts["train"]), len(parts["val"])))


def from_file(path: str | Path, max_vocab: int = 256, min_chars: int = 1000) -> Corpus:
    """Any UTF-8 text file; its last tenth is held out for validation."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"corpus file {p} does not exist") from None
    except IsADirectoryError:
        raise ValueError(f"corpus {p} is a folder; give one text file") from None
    except UnicodeDecodeError:
        raise ValueError(f"corpus file {p} is not UTF-8 text") from None
    except OSError as e:
        raise ValueError(f"cannot read corpus file {p}: {e.strerror}") from None
    if len(text) < min_chars:
        raise ValueError(f"corpus file {p} has {len(text)} characters; it needs at least {min_chars}")
    cut = len(text) - len(text) // 10
    return build(p.name, text[:cut], text[cut:], max_vocab)
