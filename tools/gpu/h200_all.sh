#!/bin/bash
# The H200 check of a whole Ember tree, run from the repo root on the GPU machine:
#     bash tools/gpu/h200_all.sh tests    # CUDA-marked tests + the frontend suite on Python 3.12
#     bash tools/gpu/h200_all.sh bench    # tools/bench.py --device cuda --suite full
#     bash tools/gpu/h200_all.sh dynamic  # the same with --dynamic: dynamic=True beside static
#     bash tools/gpu/h200_all.sh generate # tools/bench_generate.py: HF GPT-2 generate, issue #15 config
#     PROFILE_ARGS="resnet bfloat16 dynamic" bash tools/gpu/h200_all.sh profile  # profile_zoo.py
#     bash tools/gpu/h200_all.sh profile_generate  # tools/gpu/profile_generate.py: one decode step
#     PROFILE_ARGS=mlp:8192x768 bash tools/gpu/h200_all.sh profile_matmul  # profile_matmul.py
#     bash tools/gpu/h200_all.sh sweep    # tools/gpu/matmul_sweep.py: template configs vs cuBLAS
#     bash tools/gpu/h200_all.sh matmul   # tools/bench_matmul.py: issue #16's matmul suite, bf16
#     PYTEST_ARGS="-x tests/x.py" bash tools/gpu/h200_all.sh pytest  # chosen tests, one process
#     PYTEST_ARGS=tests/x.py PYTEST_K="a or b" bash tools/gpu/h200_all.sh pytest  # -k with spaces
#     SCRIPT_ARGS="tools/gpu/x.py args" bash tools/gpu/h200_all.sh script
#     MATMUL_FAMILIES=gemm bash tools/gpu/h200_all.sh matmul  # one part (files named after it)
#     bash tools/gpu/h200_all.sh optimizer  # tools/bench_optimizer.py: 100M-param AdamW step
#     AB_MODELS=resnet,hf_bert AB_VARIANTS=ember,ember_no_absorb bash tools/gpu/h200_all.sh ab
#                                         # ab_matmul_choice.py, training, model by model
#     bash tools/gpu/h200_all.sh tests bench  # several modes, one after another, in one call
# The machine has python3 with torch and triton but not Ember: the four packages are
# put on PYTHONPATH.
set -o pipefail
[ $# -eq 0 ] && set -- tests
for mode in "$@"; do
    case "$mode" in
    tests|bench|dynamic|generate|matmul|sweep|profile|profile_matmul|profile_generate|pytest|optimizer|script|ab) ;;
    *) echo "h200_all.sh: unknown mode '$mode'" >&2; exit 2 ;;
    esac
done
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/ember-h200}
mkdir -p "$OUT"
# The packages are put on the path and their stage entry points made visible through a
# small dist-info folder (the machine cannot fetch a build backend).
SRC=$PWD/packages/runtime/src:$PWD/packages/frontend/src:$PWD/packages/aot/src:$PWD/packages/inductor/src
eps=/tmp/ember-eps/ember_dev-0.1.dist-info
mkdir -p "$eps"
printf 'Metadata-Version: 2.1\nName: ember-dev\nVersion: 0.1\n' > "$eps/METADATA"
printf '[ember.stages]\naot = ember.aot.stage:AotStage\ninductor = ember.inductor.stage:InductorStage\n\n[torch_dynamo_backends]\nember = ember.runtime.dynamo_backend:ember\n' \
    > "$eps/entry_points.txt"
export PYTHONPATH=$SRC:/tmp/ember-eps
python3 -c "import sys, torch, triton; print(sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
python3 -c "from ember.runtime.stages import available_stages; print(sorted(available_stages()))"
run_mode() {
case "$1" in
tests)
    timeout "${CUDA_TESTS_TIMEOUT:-200}" python3 -m pytest -q -p no:cacheprovider -rfE -m cuda -n 4 \
        packages/runtime/tests packages/inductor/tests packages/aot/tests integration_tests \
        2>&1 | tee "$OUT/cuda_tests.log" | tail -25
    timeout "${PY312_TESTS_TIMEOUT:-200}" python3 -m pytest -q -p no:cacheprovider -rfE -n 8 \
        packages/frontend/tests integration_tests/test_corpus.py integration_tests/test_strict_models.py \
        2>&1 | tee "$OUT/frontend_py312.log" | tail -25
    ;;
bench)
    # files named after the run's kind, so that two runs in one call keep both
    name=bench_full
    case "${BENCH_ARGS:-}" in *--train*) name=bench_train ;; esac
    case "${BENCH_ARGS:-}" in *reduce-overhead*) name=${name}_reduce_overhead ;; esac
    timeout "${BENCH_TIMEOUT:-480}" python3 tools/bench.py --device cuda --suite full \
        --compilers eager,torch,ember --json "$OUT/$name.json" --markdown "$OUT/$name.md" \
        ${BENCH_ARGS:-} 2>&1 | tee "$OUT/$name.log" | tail -60
    ;;
dynamic)
    timeout "${BENCH_TIMEOUT:-540}" python3 tools/bench.py --device cuda --suite full --no-cold \
        --compilers eager,torch,ember --dynamic --json "$OUT/bench_dynamic.json" \
        --markdown "$OUT/bench_dynamic.md" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_dynamic.log" | tail -80
    ;;
generate)
    timeout "${BENCH_TIMEOUT:-540}" python3 tools/bench_generate.py --device cuda \
        --compilers eager,torch,ember --json "$OUT/generate.json" --markdown "$OUT/generate.md" \
        ${BENCH_ARGS:-} 2>&1 | tee "$OUT/generate.log" | tail -30
    ;;
matmul)
    # The whole suite with every variant may not fit one BENCH_TIMEOUT: run it in parts
    # (MATMUL_FAMILIES=gemm, then gemm_bias_gelu,mlp, then attention,attention_causal; an
    # item may name one shape: gemm:8192x8192x8192).
    # The JSON/Markdown files are rewritten after each workload, so a part stopped by the
    # timeout keeps the workloads it finished.
    tag=${MATMUL_FAMILIES:+_${MATMUL_FAMILIES//[,:]/_}}
    timeout "${BENCH_TIMEOUT:-540}" python3 tools/bench_matmul.py --device cuda --dtype bfloat16 \
        --time-limit 240 ${MATMUL_FAMILIES:+--families "$MATMUL_FAMILIES"} \
        --json "$OUT/bench_matmul$tag.json" --markdown "$OUT/bench_matmul$tag.md" \
        ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_matmul$tag.log" | tail -70
    ;;
sweep)
    # every matmul template config against cuBLAS on the issue-16 shapes (matmul_configs data)
    timeout "${BENCH_TIMEOUT:-300}" python3 tools/gpu/matmul_sweep.py ${SWEEP_ARGS:-bfloat16} \
        2>&1 | tee "$OUT/matmul_sweep.txt" | grep -v "^W1" | tail -80
    ;;
profile)
    timeout "${BENCH_TIMEOUT:-400}" python3 tools/gpu/profile_zoo.py ${PROFILE_ARGS:-resnet bfloat16 dynamic} \
        2>&1 | tee "$OUT/profile.txt" | tail -5
    ;;
profile_matmul)
    # top kernels of issue #16's workloads: eager, Ember, torch.compile
    timeout "${BENCH_TIMEOUT:-300}" python3 tools/gpu/profile_matmul.py ${PROFILE_ARGS:-mlp:8192x768} \
        2>&1 | tee "$OUT/profile_matmul.txt" | grep "=====" 
    ;;
profile_generate)
    # one decode step's time: eager, torch.compile and Ember, CPU inside forward vs GPU kernels
    timeout "${BENCH_TIMEOUT:-400}" python3 tools/gpu/profile_generate.py ${PROFILE_ARGS:-64} \
        2>&1 | tee "$OUT/profile_generate.txt" | grep "=====" 
    ;;
pytest)
    # chosen tests, one process: PYTEST_ARGS="-x integration_tests/test_x.py::test_y"
    # PYTEST_K: a -k expression with spaces ("a or b"; PYTEST_ARGS is split on spaces)
    timeout "${BENCH_TIMEOUT:-300}" python3 -m pytest -q -p no:cacheprovider -rfE ${PYTEST_ARGS:-} \
        ${PYTEST_K:+-k "$PYTEST_K"} \
        2>&1 | tee "$OUT/pytest.log" | tail -60
    ;;
optimizer)
    # issue #19's compiled AdamW step: eager, torch.compile and Ember at 100M parameters
    timeout "${BENCH_TIMEOUT:-300}" python3 tools/bench_optimizer.py --device cuda \
        --params "${OPT_PARAMS:-100}" --optimizers "${OPT_NAMES:-AdamW foreach}" ${OPT_ARGS:-} \
        2>&1 | tee "$OUT/optimizer.txt" | tail -20
    ;;
script)
    # one script: SCRIPT_ARGS="tools/gpu/debug_rerecord.py runner"
    timeout "${BENCH_TIMEOUT:-300}" python3 ${SCRIPT_ARGS:-} 2>&1 | tee -a "$OUT/script.log" | tail -60
    ;;
ab)
    # ab_matmul_choice.py's variants, training, on several models, each in its own
    # process: AB_MODELS=resnet,hf_bert AB_VARIANTS=ember,ember_no_absorb
    for model in $(echo "${AB_MODELS:-resnet,tv_resnet18,hf_gpt2,hf_bert,hf_llama}" | tr , ' '); do
        timeout "${AB_TIMEOUT:-150}" python3 tools/gpu/ab_matmul_choice.py "$model" bfloat16 full \
            "${AB_VARIANTS:-ember,ember_no_absorb}" train 2>&1 | tee -a "$OUT/ab.log" | tail -4
    done
    ;;
esac
}
# several modes run one after another in one call (one machine start):
#     bash tools/gpu/h200_all.sh tests bench
for mode in "$@"; do
    echo "===== h200_all.sh $mode"
    run_mode "$mode"
done

