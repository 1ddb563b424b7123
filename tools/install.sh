#!/usr/bin/env bash
# Installs perfdoctor into the current Python environment.
#
#   bash tools/install.sh          perfdoctor and its runtime dependencies
#   bash tools/install.sh --dev    also the test tools, torch-tb-profiler, the MCP SDK (the agent
#                                  extra), the framework test extras (lightning, transformers,
#                                  accelerate) and (as root) chromium
#
# A torch that is already installed is kept as it is (a GPU user's CUDA build stays). Only
# where there is none do we install the CPU build of torch 2.13.0, so a fresh CPU machine does
# not download a CUDA build of several GB: on Linux the public index's torch is such a CUDA
# build, so unless the configured index already serves a CPU build (`+cpu`, a mirror of
# PyTorch's CPU index), torch comes from PyTorch's CPU index (PERFDOCTOR_TORCH_CPU_INDEX
# overrides it, e.g. with a local mirror). pip's dry run reads the wheel's metadata only.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH="torch==2.13.0"
TORCH_CPU_INDEX=${PERFDOCTOR_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}

if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  if "$PY" -m pip install --dry-run -q --ignore-installed --no-deps --report - "$TORCH" \
      2>/dev/null | "$PY" tools/torch_build.py; then
    "$PY" -m pip install -q "$TORCH"
  else
    # The CPU index holds torch's own dependencies too (filelock, sympy, ...).
    "$PY" -m pip install -q "$TORCH" --index-url "$TORCH_CPU_INDEX"
  fi
fi

if [[ "${1:-}" == "--dev" ]]; then
  "$PY" -m pip install -q -e ".[dev,tb]"
  # The framework tests' extras, constrained to the torch already installed: lightning,
  # transformers and accelerate must never replace it (a GPU user's CUDA build stays).
  TORCH_VERSION=$("$PY" -c "import torch; print(torch.__version__.split('+')[0])")
  "$PY" -m pip install -q -e ".[frameworks,agent]" -c <(echo "torch==${TORCH_VERSION}")
  if ! command -v chromium >/dev/null 2>&1 && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    # The HTML report's browser test needs it; without it that test is skipped, not failed.
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
      >/dev/null 2>&1 || echo "install.sh: chromium could not be installed; browser tests will skip"
  fi
else
  "$PY" -m pip install -q -e .
fi

# Byte-compile the checkout, as pip does for a regular install and does not for an editable
# one: where PYTHONDONTWRITEBYTECODE is set (CI images, containers) nothing else ever writes
# it, and every process would compile the modules it imports again (about 1 s of CPU a
# profile here, parent and child: benchmarks/README.md, "Session 5"). compileall writes
# whatever that variable says.
"$PY" -m compileall -q -j 0 perfdoctor >/dev/null
