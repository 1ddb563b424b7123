"""Safe loading of a CUDA memory snapshot pickle (`torch.cuda.memory._dump_snapshot`).

A pickle can run arbitrary code, and run directories and snapshots get shared, so the file is
read by an unpickler whose `find_class` refuses every global: only the plain values a
snapshot holds (dicts, lists, tuples, str, bytes, numbers, bool, None) can be built. Anything
else raises UntrustedPickle before a single object of it exists.

A hostile or damaged pickle can also claim a huge object: the BINBYTES8 and BYTEARRAY8
opcodes carry a 64-bit length, and the C unpickler allocates that many bytes before it reads
them, so a 20-byte file claiming 2**62 bytes raises MemoryError. That, and the other
exceptions a malformed opcode stream raises, end in CorruptArtifact (exit 68) with one line.

A pickle can also reference one object many times (its memo): a 40 KB file can describe a
list of 10,000 references to a list of 10,000 history entries, 10**8 entries to analyse. So
the size of the data as the analysis walks it (every reference counted, shared or not) is
computed from its distinct objects, in time linear in the file, and a snapshot whose walked
size is far beyond what its bytes can hold without sharing tricks is refused. Real snapshots
share their frames (torch deduplicates them) and walk to at most a few items per byte.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

from perfdoctor.errors import CorruptArtifact, UntrustedPickle

# The walked size a snapshot may have: this many items per byte of the file, and at least
# _MIN_ITEMS (a small file); the real snapshots of the GPU corpus walk to 0.2-3.5 per byte.
ITEMS_PER_BYTE = 16
_MIN_ITEMS = 1_000_000
# A string counts one item per this many characters: the analysis scans frame file names.
_CHARS_PER_ITEM = 64

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
    limit = max(_MIN_ITEMS, ITEMS_PER_BYTE * len(raw))
    try:
        walked_size(data, limit)
    except _TooLarge as err:
        raise CorruptArtifact(
            f"corrupt memory snapshot {path}: its {len(raw):,} bytes reference {err} "
            "items (objects shared many times over); refusing to analyse it"
        ) from None
    return data


class _TooLarge(Exception):
    pass


def walked_size(root: Any, limit: int) -> int:
    """How many items a walk of `root` visits, counting a shared object at every reference;
    computed once per distinct object (linear in the pickle). _TooLarge past `limit` or for a
    cycle (a list that holds itself: an endless walk)."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        obj, children_done = stack.pop()
        oid = id(obj)
        if isinstance(obj, dict):
            kids: Any = (*obj.keys(), *obj.values())
        elif isinstance(obj, (list, tuple)):
            kids = obj
        else:
            text = isinstance(obj, (str, bytes, bytearray))
            sizes[oid] = 1 + (len(obj) // _CHARS_PER_ITEM if text else 0)
            continue
        if children_done:
            total = 1 + sum(sizes[id(k)] for k in kids)
            if total > limit:
                raise _TooLarge(f"more than {limit:,}")
            sizes[oid] = total
            on_path.discard(oid)
            continue
        if oid in sizes:
            continue
        if oid in on_path:
            raise _TooLarge("endlessly many (a container holds itself)")
        on_path.add(oid)
        stack.append((obj, True))
        stack.extend((k, False) for k in kids if id(k) not in sizes)
    return sizes[id(root)]
