"""A process-wide setting that a switchable applier holds while on and gives back while off.

The script's wish is what the setting would read in the unmodified run: its value when the
applier installed, then every change the script makes. A change through the Python API the
applier intercepts is reported with `script_changed` once it went through; one it cannot
intercept (a C-level path such as torch.backends.cudnn.flags()) is seen at the next hold or
release, as a value that is not the one the applier last wrote. Only a script that writes
the applier's own value through such a path goes unseen, and then the two positions do not
differ until it writes something else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class HeldSetting(Generic[T]):
    def __init__(self, read: Callable[[], T], write: Callable[[T], None], value: T) -> None:
        self.read = read
        self.write = write
        self.value = value  # the fix
        self.wish: T = read()
        self.held = False

    def observe(self) -> None:
        """Take the setting's value as the script's wish where the script must have set it."""
        now = self.read()
        if not self.held or now != self.value:
            self.wish = now

    def script_changed(self) -> None:
        """The script has just set it through an intercepted call."""
        self.wish = self.read()

    def hold(self) -> None:
        self.observe()
        self.write(self.value)
        self.held = True

    def release(self) -> None:
        self.observe()
        self.write(self.wish)
        self.held = False
