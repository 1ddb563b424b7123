"""perfdoctor's process-tree hook: imported by `site` in every Python process of a run.

perfdoctor puts this directory first on PYTHONPATH (with PERFDOCTOR_TREE set to the child
run directory), so every Python process the script or its launcher starts (multiprocessing
spawn/forkserver children, torch.multiprocessing.spawn workers, torchrun ranks, `subprocess`
Pythons) imports this module at start-up. It must cost next to nothing where nobody trains:
it imports only `sys` and `os`, never torch, and only installs a one-shot import hook that
hands over to perfdoctor.collect.process_tree once the process imports torch itself
(mechanics §1.2). A process that never imports torch (`python -c pass`, a launcher shell)
pays an env lookup and this module's import.

It shadows any other `sitecustomize` (distributions ship one): that one is found further
down sys.path and run after ours, as Python would have run it.
"""

import os
import sys

TREE_ENV = "PERFDOCTOR_TREE"  # perfdoctor.collect.process_tree.TREE_ENV
PARENT_ENV = "PERFDOCTOR_PARENT_PID"  # perfdoctor.collect.parent_death.PARENT_ENV
_HERE = os.path.dirname(os.path.abspath(__file__))


def _chain_next_sitecustomize() -> None:
    """Run the sitecustomize we shadow (the next one on sys.path), once."""
    import importlib.machinery
    import importlib.util

    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == __file__:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # as site.py does: report and go on
        sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{err!r}\n")


def _is_launcher_or_root() -> bool:
    """The perfdoctor child itself, or a launcher agent: never a training process."""
    argv = getattr(sys, "orig_argv", sys.argv)
    joined = " ".join(argv)
    if "perfdoctor.collect.bootstrap" in joined:
        return True  # the bootstrap instruments itself
    for module in ("torch.distributed.run", "torch.distributed.launch"):
        if f"-m {module}" in joined or f"from {module} import" in joined:
            return True
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return script in ("torchrun", "accelerate", "deepspeed")


class _TorchImportHook:
    """A meta path finder that lets torch import as usual, then activates the probes.

    It stays in place until torch is really executed: a library that only asks whether
    torch is there (`importlib.util.find_spec("torch")`) must not use it up.
    """

    def __init__(self):
        self._busy = False

    def find_spec(self, name, path=None, target=None):
        if name != "torch" or self._busy:
            return None
        self._busy = True  # the other finders below may ask the meta path again
        try:
            spec = None
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(name, path, target)
                if spec is not None:
                    break
        finally:
            self._busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        exec_module = loader.exec_module
        hook = self

        def exec_then_activate(module):
            if hook in sys.meta_path:
                sys.meta_path.remove(hook)  # one shot
            exec_module(module)
            try:
                from perfdoctor.collect import process_tree

                process_tree.activate(module)
            except Exception as err:  # never take the user's process down
                sys.stderr.write(f"perfdoctor: process probes not installed: {err!r}\n")

        loader.exec_module = exec_then_activate
        return spec


def _arm_parent_death() -> None:
    """perfdoctor's direct child (the bootstrap, torchrun, a launcher command) is told of
    perfdoctor's death, as early as it can be: collect/parent_death.py. Other processes
    pay one env lookup."""
    parent = os.environ.get(PARENT_ENV, "")
    if not parent.isdigit() or os.getppid() != int(parent):
        return
    try:
        from perfdoctor.collect import parent_death

        parent_death.arm()
    except Exception as err:  # never take the user's process down
        sys.stderr.write(f"perfdoctor: parent watch not installed: {err!r}\n")


def _install() -> None:
    if not os.environ.get(TREE_ENV) or _is_launcher_or_root():
        return
    if "torch" in sys.modules:  # imported by an earlier site hook: activate now
        try:
            from perfdoctor.collect import process_tree

            process_tree.activate(sys.modules["torch"])
        except Exception as err:
            sys.stderr.write(f"perfdoctor: process probes not installed: {err!r}\n")
        return
    sys.meta_path.insert(0, _TorchImportHook())


_arm_parent_death()
_install()
_chain_next_sitecustomize()
