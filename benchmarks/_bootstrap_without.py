"""perfdoctor's child entry point with some hook families left out (overhead diagnosis).

    python benchmarks/_bootstrap_without.py FAMILIES RUN_DIR/spec.json

FAMILIES is `none` (the child exactly as perfdoctor runs it, but without the parent
process) or a comma-separated list of: backward, dataloader, zero_grad, autocast,
grad_scaler, profiler_watch (perfdoctor.collect.probes_hooks._install_<family>) and roots
(the forward hooks of RootFinder). The optimizer hooks always stay: they define the steps.
Used by benchmarks/overhead.py to attribute the per-step cost; never by perfdoctor itself.
"""

from __future__ import annotations

import sys

import _common  # noqa: F401  (puts the checkout on sys.path)

FAMILIES = ("backward", "dataloader", "zero_grad", "autocast", "grad_scaler", "profiler_watch")


def _skip(*_args: object, **_kwargs: object) -> None:
    """Installs nothing."""


def main() -> None:
    families = [] if sys.argv[1] == "none" else sys.argv[1].split(",")
    from perfdoctor.collect import bootstrap, probes_hooks, probes_roots

    for family in families:
        if family == "roots":
            probes_roots.RootFinder.start_discovery = _skip  # type: ignore[method-assign]
        elif family in FAMILIES:
            setattr(probes_hooks, f"_install_{family}", _skip)
        else:
            raise SystemExit(f"unknown hook family {family!r}")
    sys.argv = [sys.argv[0], *sys.argv[2:]]
    bootstrap._entry()


if __name__ == "__main__":
    main()
