#!/bin/bash
# The H200 run of Ember's Triton backend: the CUDA tests, then the memory-bound benchmark.
# Run from the repo root on the GPU machine (results under $OUT):
#     bash tools/gpu/h200_triton.sh
# pytest is installed from .whl/h6 (carried) when the machine lacks it.
set -o pipefail
export PYTHONPATH=packages/runtime/src:packages/frontend/src:packages/aot/src:packages/inductor/src
export PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
OUT=${OUT:-/tmp/ember-h200}
mkdir -p "$OUT"
if ! python3 -c "import pytest" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/h6/*.whl
    export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
timeout "${TEST_TIMEOUT:-170}" python3 -m pytest -q -p no:cacheprovider -rfE \
    packages/inductor/tests/test_cuda_triton.py packages/inductor/tests/test_triton_runtime.py \
    2>&1 | tee "$OUT/pytest.log" | tail -60
timeout "${BENCH_TIMEOUT:-170}" python3 tools/gpu/h200_triton.py --out "$OUT/h200_triton.json" \
    ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | grep -v '^{' 
if [ -n "${ZOO:-}" ]; then
    # The packages are not installed there: make their stage entry points visible.
    eps=/tmp/ember-eps/ember_dev-0.0.dist-info
    mkdir -p "$eps"
    printf 'Metadata-Version: 2.1\nName: ember-dev\nVersion: 0.0\n' > "$eps/METADATA"
    printf '[ember.stages]\naot = ember.aot.stage:AotStage\ninductor = ember.inductor.stage:InductorStage\n' \
        > "$eps/entry_points.txt"
    PYTHONPATH=$PYTHONPATH:/tmp/ember-eps timeout "${ZOO_TIMEOUT:-150}" python3 tools/bench.py \
        --device cuda --suite "${ZOO_SUITE:-quick}" --no-cold --compilers eager,torch,ember \
        --json "$OUT/zoo.json" 2>&1 | tee "$OUT/zoo.log" | tail -40
fi
