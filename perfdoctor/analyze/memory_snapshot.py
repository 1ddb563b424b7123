"""Safe loading of a CUDA memory snapshot pickle (`torch.cuda.memory._dump_snapshot`).

A pickle can run arbitrary code, and run directories and snapshots get shared, so the file is
read by an unpickler whose `find_class` refuses every global: only the plain values a
snapshot holds (dicts, lists, tuples, str, bytes, numbers, bool, None) can be built. Anything
else raises UntrustedPickle before a single object of it exists.

A hostile or damaged pickle can also claim a huge object: the BINBYTES8 and BYTEARRAY8
opcodes carry a 64-bit length, and the C unpickler allocates that many bytes before it reads
them, so a 20-byte file claiming 2**62 bytes raises MemoryError. That, and the other
exceptions a malformed opcode stream raises, end in CorruptArtifact (exit 68) with one line.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

from perfdoctor.errors import CorruptArtifact, UntrustedPickle

# What the unpickler raises on a malformed stream (besides UnpicklingError): truncated data,
# bad opcodes or arguments, memo references out of range, stack underflow.
_MALFORMED = (
    EOFError,
    pickle.UnpicklingError,
    ValueError,
    TypeError,
    IndexError,
    KeyError,
    AttributeError,
    OverflowError,
    RecursionError,
)


class _PlainUnpickler(pickle.Unpickler):
    """Builds only plain containers and scalars: every global lookup is refused."""

    def __init__(self, fh: io.BufferedIOBase, path: Path) -> None:
        super().__init__(fh)
        self._path = path

    def find_class(self, module: str, name: str) -> Any:
        raise UntrustedPickle(
            f"refusing to load {self._path}: it asks for {module}.{name}, and a memory "
            "snapshot holds only plain data"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise UntrustedPickle(f"refusing to load {self._path}: it uses persistent ids")


def load_snapshot(path: Path) -> dict[str, Any]:
    """The snapshot as plain data; UntrustedPickle for anything that is not plain data,
    CorruptArtifact for a file that is not a readable snapshot."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise CorruptArtifact(f"cannot read memory snapshot {path}: {err.strerror}") from err
    try:
        data = _PlainUnpickler(io.BytesIO(raw), path).load()
    except UntrustedPickle:
        raise
    except MemoryError as err:
        # Raised while allocating an object the stream only claims: a legitimate snapshot
        # never holds an object larger than the file.
        raise CorruptArtifact(
            f"corrupt memory snapshot {path}: it declares an object too large to allocate "
            f"(the file has {len(raw):,} bytes)"
        ) from err
    except _MALFORMED as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CorruptArtifact(f"corrupt memory snapshot {path}: {reason}") from err
    if not isinstance(data, dict) or not isinstance(data.get("segments", []), list):
        raise CorruptArtifact(f"{path} is not a CUDA memory snapshot (no segments list)")
    return data
