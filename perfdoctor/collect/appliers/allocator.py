"""expandable_segments: an "env" optimization. The launcher puts
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the child's environment (the caching
allocator reads it once, at its first allocation); this applier only proves it is there."""

from __future__ import annotations

import os

from perfdoctor.collect.appliers import base
from perfdoctor.collect.appliers.base import Applier, ApplyContext

ENV_VAR = "PYTORCH_CUDA_ALLOC_CONF"
OPTION = "expandable_segments"


def _enabled(conf: str) -> bool:
    for item in conf.split(","):
        key, _, value = item.partition(":")
        if key.strip() == OPTION:
            return value.strip().lower() in ("true", "1")
    return False


class ExpandableSegments(Applier):
    id = "expandable-segments"

    def install(self, ctx: ApplyContext) -> None:
        if not base.cuda_available():
            self.refuse("expandable segments belong to the CUDA caching allocator; no CUDA here")
            return
        conf = os.environ.get(ENV_VAR, "")
        if not _enabled(conf):
            self.refuse(
                f"{ENV_VAR} in the child is {conf or 'unset'!r}: the launcher did not set it"
            )
            return
        self.mark_applied(f"{ENV_VAR}={conf}")

    def verify(self, final: bool) -> tuple[bool, str] | None:
        conf = os.environ.get(ENV_VAR, "")
        return _enabled(conf), f"{ENV_VAR} reads {conf!r}"


APPLIERS: tuple[type[Applier], ...] = (ExpandableSegments,)
