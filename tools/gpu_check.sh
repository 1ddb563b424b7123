#!/usr/bin/env bash
# The checks that need a CUDA GPU, in stages, each bounded in time, each leaving its results
# under $OUT (default: ./gpu-check-out) as it finishes, so a run cut short keeps what it did.
#
#   bash tools/gpu_check.sh tests fixtures cnn      # or: gpt overhead
#
#   tests     tests/gpu and the CUDA applier tests        -> tests.log
#   fixtures  real GPU fixtures of every sample model and
#             of a CUDA out-of-memory crash               -> fixtures.tgz, fixtures.log
#   cnn, gpt  runtime optimizations on the sample vs its
#             hand-tuned copy (benchmarks/gpu_vs_hand_tuned.py) -> MODEL.json, MODEL.log,
#             MODEL-sessions.tgz (reports of every session)
#   overhead  P1 instrumentation overhead on the GPU      -> overhead.log
set -uo pipefail
OUT="${OUT:-gpu-check-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"

stage_tests() {
    timeout "${TESTS_S:-240}" "$PY" -m pytest -q -p no:cacheprovider -rs \
        tests/gpu tests/integration/test_appliers_cuda.py 2>&1 | tee "$OUT/tests.log"
}

stage_fixtures() {
    local runs=tests/fixtures/runs
    {
        for name in cnn_slow_dataloader gpt_char_lm tabular_mlp_debug tuned_mlp; do
            timeout 90 "$PY" tools/record_fixture.py "sample_models/$name.py" \
                --out "$runs/${name}_cuda"
        done
        timeout 90 "$PY" tools/record_fixture.py tools/fixture_scripts/cuda_oom_leaky_metrics.py \
            --out "$runs/cuda_oom_leaky_metrics_cuda" --warmup 60 --steps 5 --profiled 0 \
            --allow-failure
    } 2>&1 | tee "$OUT/fixtures.log"
    tar czf "$OUT/fixtures.tgz" "$runs"/*_cuda "$runs/README.md"
}

stage_model() {
    local model=$1 keep
    keep=$(mktemp -d)
    timeout "${MODEL_S:-280}" "$PY" benchmarks/gpu_vs_hand_tuned.py --model "$model" \
        --rounds "${ROUNDS:-2}" --repeat "${REPEAT:-2}" --json-out "$OUT/$model.json" \
        --keep "$keep" 2>&1 | tee "$OUT/$model.log"
    # The reports and the session files, not the traces (they stay on the machine).
    (cd "$keep" && find . \( -name 'report.*' -o -name session.json -o -name steps.jsonl \
        -o -name manifest.json -o -name observations.json \) -print0 |
        tar czf "$OUT/$model-sessions.tgz" --null -T -)
}

stage_overhead() {
    timeout "${OVERHEAD_S:-150}" "$PY" benchmarks/overhead.py --rounds "${ROUNDS:-2}" \
        --model gpt_char_lm 2>&1 | tee "$OUT/overhead.log"
}

if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check: no CUDA device visible to torch; these checks need one" >&2
    exit 1
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" |
    tee -a "$OUT/gpu.txt"
for stage in "$@"; do
    echo "=== $stage $(date +%T)"
    case "$stage" in
        tests) stage_tests ;;
        fixtures) stage_fixtures ;;
        cnn | gpt) stage_model "$stage" ;;
        overhead) stage_overhead ;;
        *) echo "unknown stage: $stage" >&2 ;;
    esac
done
echo "=== done $(date +%T)"
