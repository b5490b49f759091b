"""Messages between the judge and the judged: a header of plain values, and tensors -- nothing else.

The judge and the code it judges live in two processes (:mod:`attnlab.judge.apart.remote`), and what
crosses between them is data: a JSON header and a list of tensors, framed by an 8-byte length.
The tensors travel through ``torch.save`` and come back through ``torch.load(weights_only=True)``,
which builds tensors and plain containers only -- never an object of the sender's choosing, so the
judged side cannot hand the judge anything that runs code. A tensor keeps its dtype, device, shape
and strides (a transposed view arrives transposed); ``None`` may stand in a tensor's place.
"""

from __future__ import annotations

import io
import json
import os
import select
import struct
import time

import torch

HEADER = struct.Struct(">Q")
MAX_BYTES = 1 << 34  # a frame larger than 16 GiB is not one of ours
WAIT_SLICE = 3600.0  # the longest one select() waits: a limit of 1e12 s overflowed the system's time_t


class Closed(EOFError):
    """The other side is gone: its end of the pipe closed before a whole message arrived."""


class TimedOut(TimeoutError):
    """No whole message arrived within the deadline."""


def plain(t) -> torch.Tensor | None:
    """A tensor as it can travel: detached, a plain ``torch.Tensor`` (a subclass's values, not its class)."""
    if t is None:
        return None
    t = t.detach()
    return t if type(t) is torch.Tensor else t.as_subclass(torch.Tensor)


def encode(header: dict, tensors=()) -> bytes:
    buf = io.BytesIO()
    torch.save({"header": json.dumps(header), "tensors": [plain(t) for t in tensors]}, buf)
    body = buf.getvalue()
    return HEADER.pack(len(body)) + body


def decode(body: bytes) -> tuple[dict, list]:
    got = torch.load(io.BytesIO(body), weights_only=True, map_location=None)
    if not isinstance(got, dict) or not isinstance(got.get("header"), str):
        raise ValueError("a message that is not one of attnlab's")
    tensors = got.get("tensors") or []
    if not all(t is None or type(t) is torch.Tensor for t in tensors):
        raise ValueError("a message whose tensors are not plain tensors")
    return json.loads(got["header"]), list(tensors)


def send(fd: int, header: dict, tensors=()) -> None:
    data = memoryview(encode(header, tensors))
    while data:
        n = os.write(fd, data)
        data = data[n:]


def receive(fd: int, seconds: float | None = None) -> tuple[dict, list]:
    """The next message on ``fd``; :class:`TimedOut` after ``seconds`` (None: wait as long as it takes),
    :class:`Closed` when the sender is gone first."""
    end = None if seconds is None else time.monotonic() + seconds
    (size,) = HEADER.unpack(_exactly(fd, HEADER.size, end))
    if size > MAX_BYTES:
        raise ValueError(f"a message of {size} bytes is not one of attnlab's")
    return decode(_exactly(fd, size, end))


def _exactly(fd: int, n: int, end: float | None) -> bytes:
    parts, got = [], 0
    while got < n:
        if end is not None:
            left = end - time.monotonic()
            if left <= 0:
                raise TimedOut(f"no answer within the limit ({n - got} bytes missing)")
            if not select.select([fd], [], [], min(left, WAIT_SLICE))[0]:
                continue  # a slice of the wait ran out: the limit may be longer than the system's wait can be
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise Closed("the other side closed the pipe")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)
