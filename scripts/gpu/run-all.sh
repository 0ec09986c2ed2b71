#!/usr/bin/env bash
# Everything for the GPU machine in one go: build against PyTorch's CUDA
# LibTorch, run the unit tests, then the requested stages. Logs and results
# go to $OUT (default ./gpu-out).
#   scripts/gpu/run-all.sh [stage...]   stages: plugins test memory conv stem onepass aba aba-imagenet aba-epochs graphgaps fusion firstrun rtc kprofile tunespread measures kernels profile bench engines libs cpu epochs graphdump metrics correctness paper dp faults imagenet warmstart parity
# (dp needs two GPUs: the nvidia-h200-x2 machine). Carry .debs (scripts/gpu/fetch-debs.sh) and, for
# the stages on real images, .data (scripts/gpu/copy-data.sh).
# A call whose stages all run only trainbench, its plugins or a program of
# bench/ builds only those targets (STAGE_TARGETS below); any other stage, the
# tests' among them, builds everything.
# Each stage's files are packed into $OUT/<n>-<stage>.tar.gz when it ends (the
# build's into 0-build.tar.gz), so that a call cut short by its time limit
# still brings back the stages it finished, as a few files, and the one it
# was in as <n>-<stage>-cut.tar.gz. The bench stage with its default labels
# (bf16 and fp32, both batches) takes more than 400 s: BENCH_BATCHES=1024 or
# 128 for one call each (it compares each batch size as soon as both sides ran
# it, so a cut keeps the ones it finished). With BENCH_MODELS="resnet18
# resnet50" BENCH_LABELS="fp32-graph fp32-cl-graph bf16-cl-graph bf16-compile
# fp32-compile": 231 s at 128, 267 s at 1024; with BENCH_LABELS=
# "fp32-cl-graph bf16-cl-graph bf16-compile-graph fp32-compile-graph" (PyTorch's
# best rows): 157 s at 128, 210 s at 1024 (on an H200).
set -uo pipefail
cd "$(dirname "$0")/../.."
RESULTS=${OUT:-$PWD/gpu-out}
OUT=$(mktemp -d /tmp/trainbench-gpu.XXXXXX)
mkdir -p "$RESULTS"
n=0
pack() {  # pack NAME: move everything in $OUT into $RESULTS/NAME.tar.gz
  tar -czf "$RESULTS/$1.tar.gz" -C "$OUT" . && rm -rf "${OUT:?}"/*
}
# Cut short (`timeout` signals the whole process group): what the running
# stage has written so far comes back too, as <n>-<stage>-cut.tar.gz.
stage=build
trap 'echo "$stage: cut short"; pack "$((n + 1))-$stage-cut"; exit 124' TERM INT
# The captured training step of trainbench and of plain PyTorch, as Graphviz
# files under $OUT/graphs, for ResNet18 bf16 at batch 128, and their kernels
# compared (bench/graph_kernels.py) into $OUT/graph-kernels$1.txt; $2, when
# given, goes first on trainbench's LD_LIBRARY_PATH.
graph_dump() {
  mkdir -p "$OUT/graphs"
  LD_LIBRARY_PATH=${2:+$2:}$LD_LIBRARY_PATH \
    build-gpu/bin/trainbench run bench/configs/graph-dump.yaml --out "$OUT/graphdump$1" --graph-dump > "$OUT/graphdump$1.log" 2>&1
  echo "trainbench rc=$?"; cp "$OUT/graphdump$1"/diagnostics/graph-cell0-0.dot "$OUT/graphs/trainbench-0.dot"
  python3 bench/pytorch_reference.py --batches 128 --models resnet18 --labels bf16-cl-graph \
    --graph-dump "$OUT/graphs/pytorch" --out "$OUT/graphs/pytorch.json"
  python3 bench/graph_kernels.py "$OUT"/graphs/trainbench-0.dot "$OUT"/graphs/pytorch-resnet18-bf16-b128.dot > "$OUT/graph-kernels$1.txt"
  cat "$OUT/graph-kernels$1.txt"
}
# tune_log FILE: the ResNets' entries of an experiment file with
# cudnn_tune_log on (a line in the cell's log per autotuned convolution,
# which bench/tuning_log.py sums up).
tune_log() {
  sed -i -E -e '/plugin: resnet(18|50)/{s/options: \{/options: {cudnn_tune_log: true, /;t;s/\}$/, options: {cudnn_tune_log: true}}/}' "$1"
}
# The PyTorch wheel's NVIDIA library folders (CUDA runtime, NVRTC, cuBLAS, cuDNN).
nvidia_libs() {
  python3 -c 'import glob, os, torch; print(":".join(sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "*", "lib")))))'
}
# The side-by-side stages (aba*) run this tree ("head") against another
# ("base": ABA_BASE, default .baseline, its sources), built once per call.
base_build=$PWD/build-base
build_base() {
  local base=${ABA_BASE:-.baseline} t1
  [ -x "$base_build/bin/trainbench" ] && return 0
  [ -d "$base" ] || { echo "aba: no baseline tree in $base"; return 1; }
  [ -e "$base/.debs" ] || ln -s "$PWD/.debs" "$base/.debs"
  t1=$(date +%s)
  (cd "$base" && TRAINBENCH_BUILD_TARGET="$runtime" scripts/gpu/build.sh "$base_build") > "$OUT/build-base.log" 2>&1 ||
    { echo "aba: the baseline does not build"; tail -20 "$OUT/build-base.log"; return 1; }
  echo "baseline build: $(( $(date +%s) - t1 )) s"
}
aba_bin() { [ "$1" = base ] && echo "$base_build/bin" || echo build-gpu/bin; }
# aba_runs NAME CONFIG: CONFIG run by each tree as ABA_STEPS says (default
# base head base head), into NAME-<n>-<setting>.
aba_runs() {
  local i=0 setting name
  for setting in ${ABA_STEPS:-base head base head}; do
    i=$((i + 1)); name=$1-$i-$setting
    "$(aba_bin $setting)/trainbench" run "$2" --out "$OUT/$name" > "$OUT/$name.log" 2>&1
    echo "$name rc=$?"; sed -n '/^model/,/^$/p' "$OUT/$name.log"
  done
}
export NCCL_NVLS_ENABLE=0
export TRAINBENCH_DATA=$PWD/.data/cifar-10-10k
STAGES=${*:-test bench}
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.max.memory,power.limit,enforced.power.limit --format=csv; nproc; } 2>&1 | tee "$OUT/machine.txt"
# Stages that run only trainbench and its plugins (and the named programs of
# bench/) need no test program built: the build then takes those targets
# only (93 s for trainbench, its worker, ResNet50 and the cuda plugin,
# against 117-151 s for everything on the H200), unless
# TRAINBENCH_BUILD_TARGET names its own. Any other stage builds everything.
runtime="trainbench trainbench-worker cpu cuda simple_cnn resnet18 resnet50"
declare -A STAGE_TARGETS=([bench]="$runtime" [measures]="$runtime" [plugins]="$runtime" [cpu]="$runtime"
  [epochs]="$runtime" [paper]="$runtime" [imagenet]="$runtime" [warmstart]="$runtime" [firstrun]="$runtime"
  [kprofile]="$runtime" [parity]="$runtime" [memory]="$runtime" [tunespread]="$runtime" [correctness]="$runtime"
  [aba]="$runtime" [aba-imagenet]="$runtime" [aba-epochs]="$runtime" [fusion]="cudnn_fusion_bench" [graphgaps]="graph_node_gaps")
if [ -z "${TRAINBENCH_BUILD_TARGET+set}" ]; then
  targets=""
  for stage in $STAGES; do
    [ -n "${STAGE_TARGETS[$stage]:-}" ] || { targets=""; break; }
    targets="$targets ${STAGE_TARGETS[$stage]}"
  done
  [ -z "$targets" ] || export TRAINBENCH_BUILD_TARGET="$(printf '%s\n' $targets | sort -u | xargs)"
fi
echo "build targets: ${TRAINBENCH_BUILD_TARGET:-all}"
t0=$(date +%s)
if ! scripts/gpu/build.sh build-gpu > "$OUT/build.log" 2>&1; then
  # Keep the other stages alive when c10d's NCCL headers do not build.
  grep -E "error" "$OUT/build.log" | head -20
  echo "build failed; retrying without data-parallel support"
  scripts/gpu/build.sh build-gpu -DTRAINBENCH_DISTRIBUTED=OFF > "$OUT/build-nodist.log" 2>&1 || { tail -50 "$OUT/build-nodist.log"; exit 1; }
fi
echo "build: $(( $(date +%s) - t0 )) s"
pack 0-build
source build-gpu/env.sh
for stage in $STAGES; do
  t0=$(date +%s)
  case $stage in
    # The Prometheus and dashboard tests need Debian's prometheus and npm, and
    # the install tests a system-wide prefix for the dependencies (here they
    # are in a private one): CI runs them.
    test) ctest --test-dir build-gpu --output-on-failure -j 8 -E "Metrics|Dashboards|Install|Sdk" > "$OUT/ctest.log" 2>&1; echo "ctest rc=$?"; tail -5 "$OUT/ctest.log"; grep -E "FAILED|Failure" -A5 "$OUT/ctest.log" | head -40 ;;
    # Issue 15's measures on the H200: time breakdown, repeats' intervals,
    # mfu, time to accuracy CPU vs GPU (bench/configs/h200-measures.yaml,
    # time-to-accuracy.yaml).
    measures)
      build-gpu/bin/trainbench run bench/configs/h200-measures.yaml --out "$OUT/measures" > "$OUT/measures.log" 2>&1
      echo "measures rc=$?"; tail -12 "$OUT/measures.log"
      TRAINBENCH_DATA=$PWD/.data/cifar-10-mini build-gpu/bin/trainbench run bench/configs/time-to-accuracy.yaml \
        --out "$OUT/tta" > "$OUT/tta.log" 2>&1
      echo "tta rc=$?"; tail -8 "$OUT/tta.log" ;;
    # The study's protocol with issue 15's measures (time to train, energy,
    # time to accuracy): on the CIFAR-10 mini set carried here (target 30%)
    # and on 50,000 synthetic images; CPU cells on a budget.
    paper-measures)
      sed -e "s/time_budget_seconds: 300/time_budget_seconds: ${CPU_BUDGET:-40}/" -e "s/target_accuracy: 0.60/target_accuracy: 0.30/" \
          -e 's/^name: paper/name: paper-mini/' configs/paper.yaml > "$OUT/paper-mini.yaml"
      TRAINBENCH_DATA=$PWD/.data/cifar-10-mini build-gpu/bin/trainbench run "$OUT/paper-mini.yaml" --out "$OUT/paper-mini" \
        > "$OUT/paper-mini.log" 2>&1
      echo "paper (mini) rc=$?"; sed -n '/^model/,$p' "$OUT/paper-mini.log"
      sed -e "s/time_budget_seconds: 300/time_budget_seconds: ${CPU_BUDGET:-40}/" \
          -e 's|^  kind: cifar10|  kind: synthetic|' -e 's|^  path: .*|  train_size: 50000\n  test_size: 5000|' \
          -e 's/^  target_accuracy: .*//' -e 's/^name: paper/name: paper-synthetic50k/' configs/paper.yaml > "$OUT/paper-synthetic.yaml"
      build-gpu/bin/trainbench run "$OUT/paper-synthetic.yaml" --out "$OUT/paper-synthetic" > "$OUT/paper-synthetic.log" 2>&1
      echo "paper (synthetic 50k) rc=$?"; sed -n '/^model/,$p' "$OUT/paper-synthetic.log" ;;
    # The fused CUDA kernels (SimpleCNN's epilogue, the ResNets' batch norm):
    # their tests alone (a subset of `test`).
    # KERNEL_TESTS: another ctest regex (a rerun of a few); KERNEL_BENCH=0:
    # without the batch norm micro-benchmark.
    kernels) ctest --test-dir build-gpu --output-on-failure -j 4 -R "${KERNEL_TESTS:-BiasReluMaxPool|BatchNormAct|MaxPool|WorkingCopies|Classifier|MixedPrecisionSgd|StemConv|CudnnConv|SideStream|OptimizerOverlap|StreamGate|Models\.|Stem|GraphFill|BeforeSm90|WholeMap|SideStreams|BatchNormPlan|KernelTrace}" > "$OUT/kernels.log" 2>&1
      echo "kernel tests rc=$?"; tail -4 "$OUT/kernels.log"; grep -E "FAILED|Failure" -A8 "$OUT/kernels.log" | head -60
      # The ResNets' batch norm alone, fused vs composite, per shape.
      [ "${KERNEL_BENCH:-1}" = 0 ] || build-gpu/bin/batch_norm_act_bench 1024 | tee "$OUT/batch-norm-bench.md" ;;
    # cuDNN's fused convolutions (statistics gathered in the epilogue, the
    # batch norm's scale-bias-ReLU applied in the prologue) against the
    # model's convolutions and batch norms, per shape
    # (bench/cudnn_fusion_bench.cc); the wheel's NVRTC on the library path for
    # the runtime-compiled engines.
    fusion)
      libs=$(nvidia_libs)
      for model in ${FUSION_MODELS:-resnet50 resnet18}; do for b in ${FUSION_BATCHES:-1024 128}; do for p in ${FUSION_PRECISIONS:-bf16}; do
        LD_LIBRARY_PATH=$libs:$LD_LIBRARY_PATH timeout "${FUSION_TIMEOUT:-200}" build-gpu/bin/cudnn_fusion_bench "$b" "$model" "$p" \
          > "$OUT/fusion-$model-b$b-$p.md" 2>&1
        echo "fusion $model b$b $p rc=$?"; cat "$OUT/fusion-$model-b$b-$p.md"
      done; done; done ;;
    # Plain PyTorch's SimpleCNN step kernel by kernel, eager and torch.compile.
    profile)
      for mode in eager compile; do
        python3 bench/kernel_profile.py --model simple_cnn --batch 1024 --mode $mode --channels-last \
          > "$OUT/profile-simple_cnn-b1024-bf16-$mode.md" 2> "$OUT/profile-$mode.err"; head -3 "$OUT/profile-simple_cnn-b1024-bf16-$mode.md"
      done ;;
    bench) bench/gpu_vs_pytorch.sh build-gpu "$OUT/bench" ${BENCH_BATCHES:-128 1024} > "$OUT/bench.log" 2>&1; echo "bench rc=$?"; cat "$OUT/bench/comparison.md" ;;
    plugins) build-gpu/bin/trainbench plugins ;;
    # Both programs' captured steps compared kernel by kernel.
    graphdump) graph_dump "" ;;
    # ResNet18 bf16 graph under three cuDNN engine choices, then PyTorch's step.
    engines)
      build-gpu/bin/trainbench run bench/configs/resnet18-engines.yaml --out "$OUT/engines" > "$OUT/engines.log" 2>&1
      echo "engines run rc=$?"; sed -n '/^model/,$p' "$OUT/engines.log"
      python3 bench/pytorch_reference.py --batches 128 --models resnet18 --labels bf16-cl-graph --out "$OUT/engines-pytorch.json" ;;
    # Which cuDNN, NVRTC and cuBLAS libraries plain PyTorch's process and a
    # trainbench worker load, with cuDNN's warnings; then ResNet18 bf16 with
    # every NVIDIA library folder of the PyTorch wheel on LD_LIBRARY_PATH
    # (cuDNN's runtime-compiled engines dlopen NVRTC by name), timed and its
    # captured graph compared with PyTorch's.
    libs)
      CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=$OUT/cudnn-pytorch.log python3 scripts/gpu/loaded_libs.py > "$OUT/libs-pytorch.txt" 2>&1
      ( for i in $(seq 1 60); do sleep 0.5; for p in $(pgrep -f bin/trainbench-worker); do
          grep -oE '/[^ ]*(cudnn|nvrtc|cublas|nvJitLink)[^ ]*' /proc/$p/maps 2>/dev/null | sort -u > "$OUT/libs-trainbench.txt.new" && mv "$OUT/libs-trainbench.txt.new" "$OUT/libs-trainbench.txt"
        done; done ) &
      sampler=$!
      CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=$OUT/cudnn-trainbench.log build-gpu/bin/trainbench run bench/configs/graph-dump.yaml --out "$OUT/libs-run" > "$OUT/libs-run.log" 2>&1
      echo "trainbench rc=$?"; kill $sampler 2>/dev/null; wait $sampler 2>/dev/null
      echo "--- pytorch"; cat "$OUT/libs-pytorch.txt"; echo "--- trainbench worker"; cat "$OUT/libs-trainbench.txt"
      echo "--- cuDNN warnings: pytorch $(wc -l < "$OUT/cudnn-pytorch.log"), trainbench $(wc -l < "$OUT/cudnn-trainbench.log")"
      grep -iE "warn|fail|nvrtc|unable|cannot" "$OUT/cudnn-trainbench.log" | sort | uniq -c | sort -rn | head -15
      NVLIBS=$(nvidia_libs)
      echo "nvidia lib folders: $NVLIBS"
      sed -e '/label: limit-10/d' -e '/label: heuristics/d' -e 's/^name: .*/name: resnet18-engines-nvlibs/' \
        bench/configs/resnet18-engines.yaml > "$OUT/engines-nvlibs.yaml"
      LD_LIBRARY_PATH=$NVLIBS:$LD_LIBRARY_PATH build-gpu/bin/trainbench run "$OUT/engines-nvlibs.yaml" --out "$OUT/engines-nvlibs" > "$OUT/engines-nvlibs.log" 2>&1
      echo "engines with nvidia libs rc=$?"; sed -n '/^model/,$p' "$OUT/engines-nvlibs.log"
      graph_dump -nvlibs "$NVLIBS" ;;
    # trainbench's cpu device against plain PyTorch on this machine's CPU (the
    # denominator of every speedup), then ResNet18's scaling with threads.
    cpu)
      bench/cpu_vs_pytorch.sh build-gpu "$OUT/cpu" > "$OUT/cpu.log" 2>&1; echo "cpu bench rc=$?"; cat "$OUT/cpu/comparison.md"
      for t in 1 2 4 8 16; do
        BENCH_MODELS=resnet18 BENCH_THREADS=$t BENCH_REPEATS=1 BENCH_ROUNDS=1 bench/cpu_vs_pytorch.sh build-gpu "$OUT/cpu-t$t" > "$OUT/cpu-t$t.log" 2>&1
        grep "^| resnet18 | fp32 |" "$OUT/cpu-t$t/comparison.md"
      done ;;
    epochs)
      build-gpu/bin/trainbench run bench/configs/epoch-rate.yaml --out "$OUT/epoch-rate" > "$OUT/epoch-rate.log" 2>&1
      echo "epoch-rate run rc=$?"; python3 bench/epoch_rate.py "$OUT/epoch-rate/results.json" | tee "$OUT/epoch-rate.md" ;;
    metrics)
      # /metrics served by the host while a worker trains on the GPU with the
      # CUDA LibTorch loaded (civetweb cannot start in that process itself).
      build-gpu/bin/trainbench run bench/configs/metrics-gpu.yaml --out "$OUT/metrics-run" \
        --metrics-addr 127.0.0.1:9464 --metrics-linger 2 > "$OUT/metrics-run.log" 2>&1 &
      pid=$!
      for i in 1 2 3 4 5 6 7 8; do
        sleep 4
        curl -s 127.0.0.1:9464/metrics > "$OUT/metrics-scrape-$i.txt" || true
        echo "scrape $i: $(grep -E '^trainbench_samples_total|^trainbench_gpu_utilization_ratio|^trainbench_gpu_power_watts' "$OUT/metrics-scrape-$i.txt" | tr '\n' ' ')"
      done
      wait $pid; echo "metrics run rc=$?"; tail -3 "$OUT/metrics-run.log" ;;
    correctness)
      build-gpu/bin/trainbench run bench/configs/correctness.yaml --out "$OUT/correctness" > "$OUT/correctness.log" 2>&1
      echo "correctness run rc=$?"; python3 bench/correctness.py "$OUT/correctness/results.json" | tee "$OUT/correctness.md" ;;
    paper)
      # The study's protocol on the 10,000 real images carried here, and on a
      # synthetic set of the full 50,000-image size; CPU cells on a budget.
      # Then the GPU cells again "stock" (every model without its fused
      # kernels, the ResNets' convolutions through LibTorch), GPU only: their
      # speedups are over the first runs' CPU cells.
      synthetic=(-e 's|^  kind: cifar10|  kind: synthetic|' -e 's|^  path: .*|  train_size: 50000\n  test_size: 5000|')
      stock=(-e '/^  - plugin: cpu$/,/time_budget_seconds/d' -e 's/^  baseline: cpu/  baseline: cuda/'
             -e 's/^  - simple_cnn$/  - {plugin: simple_cnn, label: simple_cnn-stock, options: {fused_epilogue: false}}/'
             -e 's/^  - \(resnet[0-9]*\)$/  - {plugin: \1, label: \1-stock, options: {fused_batchnorm: false, fused_maxpool: false, fused_classifier: false, cudnn_engine_cache: false}}/')
      paper_run() {  # paper_run NAME SED-ARGS...: configs/paper.yaml, edited
        local name=$1; shift
        sed -e "s/time_budget_seconds: 300/time_budget_seconds: ${CPU_BUDGET:-40}/" -e "s/^name: paper/name: $name/" "$@" \
          configs/paper.yaml > "$OUT/$name.yaml"
        build-gpu/bin/trainbench run "$OUT/$name.yaml" --out "$OUT/$name" > "$OUT/$name.log" 2>&1
        echo "$name rc=$?"; sed -n '/^model/,$p' "$OUT/$name.log"
      }
      # PAPER_RUNS: a subset of the four runs, in the order given.
      for run in ${PAPER_RUNS:-paper-10k paper-synthetic50k paper-10k-stock paper-synthetic50k-stock}; do
        case $run in
          paper-10k) paper_run paper-10k ;;
          paper-synthetic50k) paper_run paper-synthetic50k "${synthetic[@]}" ;;
          paper-10k-stock) paper_run paper-10k-stock "${stock[@]}" ;;
          paper-synthetic50k-stock) paper_run paper-synthetic50k-stock "${synthetic[@]}" "${stock[@]}" ;;
          *) echo "PAPER_RUNS: unknown run $run" ;;
        esac
      done ;;
    dp)
      # Data parallelism: one GPU vs two (NCCL), then two GPUs vs one for correctness.
      nvidia-smi topo -m > "$OUT/gpu-topology.txt" 2>&1
      for b in ${DP_BATCHES:-2048 4096}; do
        sed -e "s/batch_size: 1024/batch_size: $b/" -e "s/^name: .*/name: data-parallel-b$b/" \
          bench/configs/data-parallel-gpu.yaml > "$OUT/dp-b$b.yaml"
        build-gpu/bin/trainbench run "$OUT/dp-b$b.yaml" --out "$OUT/dp-b$b" > "$OUT/dp-b$b.log" 2>&1
        echo "dp batch $b rc=$?"; sed -n '/^model/,$p' "$OUT/dp-b$b.log"
      done
      build-gpu/bin/trainbench run bench/configs/data-parallel-correctness.yaml --out "$OUT/dp-correctness" \
        > "$OUT/dp-correctness.log" 2>&1
      echo "dp correctness rc=$?"; sed -n '/^model/,$p' "$OUT/dp-correctness.log"
      # The same with another seed: how far two one-GPU runs drift apart.
      sed -e 's/^seed: .*/seed: 12/' -e 's/^name: .*/name: data-parallel-seed12/' \
        bench/configs/data-parallel-correctness.yaml > "$OUT/dp-seed12.yaml"
      build-gpu/bin/trainbench run "$OUT/dp-seed12.yaml" --out "$OUT/dp-seed12" > "$OUT/dp-seed12.log" 2>&1
      python3 bench/data_parallel_check.py "$OUT/dp-correctness/results.json" --noise "$OUT/dp-seed12/results.json" \
        | tee "$OUT/dp-correctness.md" ;;
    faults)
      build-gpu/bin/trainbench run bench/configs/gpu-faults.yaml --out "$OUT/gpu-faults" \
        --plugin-dir build-gpu/tests/test_plugins > "$OUT/gpu-faults.log" 2>&1
      echo "gpu faults rc=$? (3 expected: cells failed)"; python3 scripts/gpu/check_faults.py "$OUT/gpu-faults/results.json" ;;
    # Issue 16: ImageNet-size inputs (224 px, 1000 classes), trainbench's
    # CPU and GPU cells and plain PyTorch's best for the same step.
    # IMAGENET_GPU_ONLY=1: the GPU cells alone (the CPU cells take minutes
    # and do not change with the GPU kernels), torch.compile for ResNet50 only.
    # Peak GPU memory against plain PyTorch's at the bench's points
    # (bench/gpu_memory.sh), for each of MEMORY_VARIANTS (default: this tree's
    # settings): variants separated by ';', each "TAG|MODEL_OPTIONS|DEVICE_OPTIONS"
    # (e.g. "nolimit|cudnn_workspace_limit_mb: 0" or "card8||memory_limit_gib: 8");
    # PyTorch runs with the first (MEMORY_WITH_PYTORCH=0: not at all).
    memory)
      first=1
      IFS=';' read -r -a variants <<< "${MEMORY_VARIANTS:-head}"
      for v in "${variants[@]}"; do
        IFS='|' read -r tag model_options device_options <<< "$v"
        MEMORY_PYTORCH=$((first && ${MEMORY_WITH_PYTORCH:-1})) MEMORY_MODEL_OPTIONS=$model_options \
          MEMORY_DEVICE_OPTIONS=$device_options bench/gpu_memory.sh build-gpu "$OUT/memory" "$tag"
        first=0
      done ;;
    imagenet)
      config=bench/configs/imagenet-size.yaml compiled="resnet18 resnet50"
      if [ "${IMAGENET_GPU_ONLY:-0}" = 1 ]; then
        sed -e '/- {plugin: cpu/d' -e 's/baseline: cpu/baseline: bf16-cl-graph/' $config > "$OUT/imagenet-gpu.yaml"
        config=$OUT/imagenet-gpu.yaml compiled=resnet50
      fi
      build-gpu/bin/trainbench run $config --out "$OUT/imagenet" > "$OUT/imagenet.log" 2>&1
      echo "imagenet rc=$?"; sed -n '/^model/,$p' "$OUT/imagenet.log"
      python3 bench/pytorch_reference.py --image-size 224 --classes 1000 --batches 256 --models resnet18 resnet50 \
        --labels bf16-cl-graph bf16-compile --compile $compiled --out "$OUT/imagenet-pytorch.json" 2>&1 | grep -v Warning | tee "$OUT/imagenet-pytorch.log" ;;
    # Issue 16: where the first epoch goes and the warm start. Each way of
    # running the convolutions (trainbench's cuDNN path with its engine
    # cache; LibTorch's) from a fresh start: empty engine cache and empty
    # CUDA compute cache, then a repeat run on what the first left on disk.
    warmstart)
      for variant in ${WARMSTART_VARIANTS:-resnet50 resnet50-libtorch-conv}; do
        other=$([ $variant != resnet50-libtorch-conv ] && echo "label: resnet50-libtorch-conv" || echo "label: resnet50}")
        sed -e "/$other/d" -e "s/^name: .*/name: warm-start-$variant/" bench/configs/warm-start.yaml > "$OUT/ws-$variant.yaml"
        tune_log "$OUT/ws-$variant.yaml"
        export XDG_CACHE_HOME=$(mktemp -d /tmp/trainbench-cache.XXXXXX) CUDA_CACHE_PATH=$(mktemp -d /tmp/cuda-cache.XXXXXX)
        for run in first repeat; do
          build-gpu/bin/trainbench run "$OUT/ws-$variant.yaml" --out "$OUT/ws-$variant-$run" > "$OUT/ws-$variant-$run.log" 2>&1
          echo "$variant $run run rc=$?"
          python3 -c "import json,sys; [print(' ', c['model'], c['device'], 'samples/s', round(c.get('samples_per_second',0)), 'train', round(c.get('train_seconds',0),2), 's; warm-up', round(c.get('warmup_seconds',0),2), '; whole', round(c.get('time_to_train_seconds',0),2)) for c in json.load(open(sys.argv[1]))['cells']]" "$OUT/ws-$variant-$run/results.json"
        done
        cp "$XDG_CACHE_HOME"/trainbench/*.json "$OUT/ws-$variant-engines.json" 2>/dev/null
        unset XDG_CACHE_HOME CUDA_CACHE_PATH
      done
      # Where the first run's tuning went (trainbench's path).
      for log in "$OUT"/ws-resnet50-first/logs/cell-00-*.log; do
        [ -f "$log" ] && { echo "$log:"; python3 bench/tuning_log.py "$log"; }
      done
      ;;
    # Issue 16: the first run from a cold machine, one way of choosing engines
    # per run, each from an empty engine cache and CUDA compute cache: every
    # engine timed (precompiled ones: the default), then a repeat run on what
    # it left on disk; every engine with the runtime-compiled ones (LibTorch's
    # set); PyTorch's default limit of 10; heuristics.
    firstrun)
      ws_run() {  # ws_run NAME DEVICE-LABEL MODEL-OPTIONS: one cell of warm-start.yaml
        sed -e '/label: resnet50-libtorch-conv/d' -e "/label: $2/!{/- {plugin: cuda/d}" \
            -e "s/label: resnet50}/label: resnet50${3:+, options: {$3\}}}/" \
            -e "s/^name: .*/name: first-run-$1/" -e "s/^measurement: .*/measurement: {warmup_steps: 5, baseline: $2}/" \
            bench/configs/warm-start.yaml > "$OUT/fr-$1.yaml"
        tune_log "$OUT/fr-$1.yaml"
        build-gpu/bin/trainbench run "$OUT/fr-$1.yaml" --out "$OUT/fr-$1" > "$OUT/fr-$1.log" 2>&1
        echo "$1 rc=$?"
        python3 -c "import json,sys; [print(' ', c['model'], c['device'], 'samples/s', round(c.get('samples_per_second',0)), 'train', round(c.get('train_seconds',0),2), 's; warm-up', round(c.get('warmup_seconds',0),2)) for c in json.load(open(sys.argv[1]))['cells']]" "$OUT/fr-$1/results.json"
        python3 bench/tuning_log.py "$OUT"/fr-$1/logs/cell-*.log
      }
      fresh() { export XDG_CACHE_HOME=$(mktemp -d /tmp/trainbench-cache.XXXXXX) CUDA_CACHE_PATH=$(mktemp -d /tmp/cuda-cache.XXXXXX); }
      fresh; ws_run autotuned autotuned ""; ws_run autotuned-repeat autotuned ""
      cp "$XDG_CACHE_HOME"/trainbench/*.json "$OUT/fr-engines.json" 2>/dev/null
      fresh; ws_run autotuned-runtime-compiled autotuned "cudnn_runtime_compiled: true"
      fresh; ws_run limit-10 limit-10 ""
      fresh; ws_run heuristics heuristics ""
      unset XDG_CACHE_HOME CUDA_CACHE_PATH ;;
    # Issue 16: what the runtime-compiled engines win (bench/configs/runtime-compiled.yaml).
    rtc)
      export XDG_CACHE_HOME=$(mktemp -d /tmp/trainbench-cache.XXXXXX)
      cp bench/configs/runtime-compiled.yaml "$OUT/rtc.yaml"; tune_log "$OUT/rtc.yaml"
      build-gpu/bin/trainbench run "$OUT/rtc.yaml" --out "$OUT/rtc" > "$OUT/rtc.log" 2>&1
      echo "rtc run rc=$?"; sed -n '/^model/,$p' "$OUT/rtc.log"
      for log in "$OUT"/rtc/logs/cell-*.log; do echo "$(basename "$log")"; python3 bench/tuning_log.py "$log"; done
      unset XDG_CACHE_HOME ;;
    # The convolutions through cuDNN's backend API (the warm start): their
    # tests and the models' (a subset of `test`).
    conv) ctest --test-dir build-gpu --output-on-failure -j 4 -R "CudnnConv|StemConv|StreamGate|EngineCache|Models\." > "$OUT/conv.log" 2>&1
      echo "conv tests rc=$?"; tail -4 "$OUT/conv.log"; grep -E "FAILED|Failure|error" -A8 "$OUT/conv.log" | head -80 ;;
    # Issue 16: the ResNets' captured step kernel by kernel, bf16 (and fp32
    # with KPROFILE_FP32=1), batch KPROFILE_BATCH (default 1024): trainbench
    # (defaults and stock) from its own traces, plain PyTorch (KPROFILE_MODES,
    # default eager and compile) from torch.profiler (KPROFILE_MODELS).
    kprofile)
      mkdir -p "$OUT/kprofile"
      kbatch=${KPROFILE_BATCH:-1024}
      # KPROFILE_COMPOSITE=0: trainbench's defaults only (not the stock cells).
      precisions=bf16 edits=(-e "s/batch_size: 1024/batch_size: $kbatch/")
      [ "${KPROFILE_COMPOSITE:-1}" = 0 ] && edits+=(-e /-composite/d)
      # KPROFILE_FP32=1: an fp32 device beside the bf16 one (no autocast).
      [ "${KPROFILE_FP32:-0}" = 1 ] && precisions="bf16 fp32" &&
        edits+=(-e "/label: bf16-cl-graph,/{p;s/bf16-cl-graph/fp32-cl-graph/;s/amp: bf16, //}")
      sed "${edits[@]}" bench/configs/kernel-trace.yaml > "$OUT/kprofile/kernel-trace.yaml"
      # The rates untraced first (a traced cell runs a little slower).
      build-gpu/bin/trainbench run "$OUT/kprofile/kernel-trace.yaml" --out "$OUT/kprofile/rates" > "$OUT/kprofile/rates.log" 2>&1
      echo "rates rc=$?"; grep -E "^(model|resnet)" "$OUT/kprofile/rates.log"
      build-gpu/bin/trainbench run "$OUT/kprofile/kernel-trace.yaml" --out "$OUT/kprofile/run" --kernel-trace > "$OUT/kprofile/run.log" 2>&1
      echo "kernel-trace run rc=$?"; sed -n '/^model/,$p' "$OUT/kprofile/run.log"
      for log in "$OUT"/kprofile/run/logs/cell-*.log; do
        name=$(basename "$log" .log)
        read -r steps trace < <(sed -n 's/^kernel trace: \([0-9]*\) timed steps written to \(.*\)/\1 \2/p' "$log" | tail -1)
        if [ -z "$trace" ]; then echo "$name: no trace"; grep "kernel trace" "$log"; continue; fi
        python3 bench/kernel_profile.py --trace "$trace" --steps "$steps" --batch "$kbatch" --title "trainbench $name" \
          --json "$OUT/kprofile/$name.json" > "$OUT/kprofile/$name.md"
        sed -n '1,16p' "$OUT/kprofile/$name.md"; grep -A14 "^## Timeline" "$OUT/kprofile/$name.md"; gzip "$trace"
      done
      for model in ${KPROFILE_MODELS-resnet50}; do
        for mode in ${KPROFILE_MODES:-eager compile}; do for precision in $precisions; do
          name=pytorch-$model-$mode$([ "$precision" = bf16 ] || echo "-$precision")
          python3 bench/kernel_profile.py --model $model --batch "$kbatch" --mode $mode --precision $precision --channels-last \
            --json "$OUT/kprofile/$name.json" > "$OUT/kprofile/$name.md" 2> "$OUT/kprofile/$name.err"
          echo "$name rc=$?"; sed -n '1,16p' "$OUT/kprofile/$name.md"
        done; done
      done
      python3 bench/kernel_profile.py --compare "$OUT"/kprofile/*.json | tee "$OUT/kprofile/side-by-side.md" ;;
    # Issue 16: the stem's convolution in space-to-depth form against the 7x7
    # one, both ResNets at 32 px (batch 1024), then ResNet50 at 224 px (batch
    # 256), and the convolution alone in plain PyTorch (bench/stem_conv.py).
    stem)
      build-gpu/bin/trainbench run bench/configs/stem.yaml --out "$OUT/stem" > "$OUT/stem.log" 2>&1
      echo "stem rc=$?"; sed -n '/^model/,/^$/p' "$OUT/stem.log"
      sed -e '/resnet18/d' -e 's/^name: stem/name: stem-224/' -e 's/train_size: 61440, test_size: 1000}/train_size: 15360, test_size: 512, image_size: 224}/' \
          -e 's/batch_size: 1024/batch_size: 256/' -e 's/eval_batch_size: 1000/eval_batch_size: 256/' bench/configs/stem.yaml > "$OUT/stem-224.yaml"
      build-gpu/bin/trainbench run "$OUT/stem-224.yaml" --out "$OUT/stem-224" > "$OUT/stem-224.log" 2>&1
      echo "stem 224 rc=$?"; sed -n '/^model/,/^$/p' "$OUT/stem-224.log"
      python3 bench/stem_conv.py --batches 128 1024 --size 32 | tee "$OUT/stem-conv.md"
      python3 bench/stem_conv.py --batches 256 --size 224 | tee -a "$OUT/stem-conv.md" ;;
    # Issue 16: the batch norms as one kernel each way against two, both
    # ResNets side by side at each of ONEPASS_BATCHES (default 1024 128), and
    # the batch norms alone per shape (bench/batch_norm_act_bench.cc).
    onepass)
      for batch in ${ONEPASS_BATCHES:-1024 128}; do
        name=onepass-b$batch
        sed -e "s/batch_size: 1024/batch_size: $batch/" -e "s/^name: bn-one-pass/name: bn-one-pass-b$batch/" \
            bench/configs/bn-one-pass.yaml > "$OUT/$name.yaml"
        build-gpu/bin/trainbench run "$OUT/$name.yaml" --out "$OUT/$name" > "$OUT/$name.log" 2>&1
        echo "$name rc=$?"; sed -n '/^model/,/^$/p' "$OUT/$name.log"
        [ "${ONEPASS_KERNELS:-1}" = 0 ] || for model in resnet18 resnet50; do
          build-gpu/bin/batch_norm_act_bench $batch $model | tee -a "$OUT/$name-kernels.md"
        done
      done ;;
    # Issue 16: what a CUDA graph adds between two kernels per kind of node
    # between them (a memset node, a fill kernel, child graphs;
    # bench/graph_node_gaps.cu), at 64 rounds, median of 25 replays.
    graphgaps) build-gpu/bin/graph_node_gaps | tee "$OUT/graph-node-gaps.md" ;;
    # This tree against another (a change's side-by-side; the standard for
    # "no slower"): ABA_BASE names a folder with the other tree's sources
    # (e.g. `git archive COMMIT | tar -x -C .baseline`, carried), built here
    # into build-base for the runtime targets. The ResNets' captured step
    # (bench/configs/bn-geometry.yaml: ResNet18 and ResNet50, bf16 and fp32,
    # channels_last) at each of ABA_BATCHES (default 1024 128), runs
    # interleaved as ABA_STEPS says (default base head base head), then
    # bench/aba.py: each cell's mean against the base's, and whether the runs
    # are apart.
    aba|aba-imagenet|aba-epochs)
      build_base || continue
      case $stage in
        aba)
          for batch in ${ABA_BATCHES:-1024 128}; do
            # ABA_EAGER=1: the fp32 eager cells too (NCHW, no graph).
            sed -e "s/batch_size: 1024/batch_size: $batch/" -e "s/^name: bn-geometry/name: aba-b$batch/" \
                ${ABA_EAGER:+-e '/label: fp32-cl-graph/a\  - {plugin: cuda, label: fp32, options: {amp: none}}'} \
                bench/configs/bn-geometry.yaml > "$OUT/geometry-b$batch.yaml"
            aba_runs geometry-b$batch "$OUT/geometry-b$batch.yaml"
          done
          python3 bench/aba.py "$OUT" --baseline base | tee "$OUT/aba.md" ;;
        # ImageNet size (224 px, batch 256, bf16): the GPU cells of
        # bench/configs/imagenet-size.yaml.
        aba-imagenet)
          sed -e '/- {plugin: cpu/d' -e 's/baseline: cpu/baseline: bf16-cl-graph/' bench/configs/imagenet-size.yaml > "$OUT/imagenet.yaml"
          aba_runs imagenet-b256 "$OUT/imagenet.yaml"
          python3 bench/aba.py "$OUT" --baseline base | tee "$OUT/aba.md" ;;
        # Ten ResNet50 epochs (50,000 images, bf16, batch 1024, graph;
        # bench/configs/warm-start.yaml's autotuned cell): each tree from an
        # empty engine cache and CUDA compute cache (cold), then again on
        # what that run left on disk (warm); whole time to train and the
        # timed epochs' rate.
        aba-epochs)
          sed -e '/resnet50-libtorch-conv/d' -e '/label: limit-10/d' -e '/label: heuristics/d' -e 's/^name: .*/name: aba-epochs/' \
              bench/configs/warm-start.yaml > "$OUT/epochs.yaml"
          i=0
          for setting in ${ABA_STEPS:-base head base head}; do
            i=$((i + 1))
            export XDG_CACHE_HOME=$(mktemp -d /tmp/trainbench-cache.XXXXXX) CUDA_CACHE_PATH=$(mktemp -d /tmp/cuda-cache.XXXXXX)
            for run in cold warm; do
              name=$run-b1024-$i-$setting
              "$(aba_bin $setting)/trainbench" run "$OUT/epochs.yaml" --out "$OUT/$name" > "$OUT/$name.log" 2>&1
              echo "$name rc=$?"; sed -n '/^model/,/^$/p' "$OUT/$name.log"
            done
            unset XDG_CACHE_HOME CUDA_CACHE_PATH
          done
          for metric in time_to_train_seconds train_seconds samples_per_second; do
            python3 bench/aba.py "$OUT" --baseline base --metric $metric
          done | tee "$OUT/aba.md" ;;
      esac ;;
    # Issue 16: trainbench and plain PyTorch train to the same accuracy. The
    # two sides share the GPU at once (their accuracy does not depend on it).
    parity)
      mkdir -p "$OUT/parity"
      python3 bench/accuracy_parity.py "$TRAINBENCH_DATA" --seeds ${PARITY_SEEDS:-0 1 2 3} --out "$OUT/parity/pytorch.json" > "$OUT/parity-pytorch.log" 2>&1 &
      pytorch=$!
      for seed in ${PARITY_SEEDS:-0 1 2 3}; do
        sed -e "s/^seed: .*/seed: $seed/" bench/configs/accuracy-parity.yaml > "$OUT/parity-$seed.yaml"
        build-gpu/bin/trainbench run "$OUT/parity-$seed.yaml" --out "$OUT/parity/seed-$seed" > "$OUT/parity-$seed.log" 2>&1
        echo "trainbench seed $seed rc=$?"; sed -n '/^model/,/^$/p' "$OUT/parity-$seed.log"
      done
      wait $pytorch; echo "pytorch rc=$?"; grep -v Warning "$OUT/parity-pytorch.log"
      python3 bench/accuracy_parity.py --compare "$OUT/parity/pytorch.json" "$OUT"/parity/seed-*/results.json | tee "$OUT/parity.md" ;;
    # How much of a rate is the autotuning's draw: ResNet50 bf16 graph b1024
    # (bench/configs/kernel-trace.yaml) from an empty engine cache three
    # times (each run times every engine anew), then twice more on the last
    # run's file (the same engines). Spread among the first three and not
    # the last two: the tuning's choices (ResNet50's convolutions once
    # took 2,154 us in one call and 2,480 in another).
    tunespread)
      # 200 timed steps (the kernel trace's 30 would add their own noise).
      # TUNESPREAD_PRECISION=fp32: the fp32 (TF32) cell instead, whose rate
      # once differed by 3.5% between two calls while bf16's matched.
      fp32=s/x/x/
      [ "${TUNESPREAD_PRECISION:-bf16}" = fp32 ] && fp32='s/bf16-cl-graph, options: {amp: bf16, /fp32-cl-graph, options: {/;s/baseline: bf16-cl-graph/baseline: fp32-cl-graph/'
      sed -e '/resnet18/d' -e '/composite/d' -e 's/train_size: 61440/train_size: 230400/' -e 's/max_steps: 50/max_steps: 220/' \
        -e "$fp32" bench/configs/kernel-trace.yaml > "$OUT/tunespread.yaml"
      tune_log "$OUT/tunespread.yaml"
      for run in ${TUNESPREAD_RUNS:-fresh-1 fresh-2 fresh-3 cached-1 cached-2}; do
        case $run in fresh-*) export XDG_CACHE_HOME=$(mktemp -d /tmp/trainbench-cache.XXXXXX) ;; esac
        build-gpu/bin/trainbench run "$OUT/tunespread.yaml" --out "$OUT/tunespread-$run" > "$OUT/tunespread-$run.log" 2>&1
        echo "$run rc=$? $(grep -E '^resnet50 ' "$OUT/tunespread-$run.log" | awk '{print $4, "samples/s"}')"
        case $run in fresh-*) python3 bench/tuning_log.py "$OUT/tunespread-$run"/logs/cell-*.log | head -2 ;; esac
      done
      cp "$XDG_CACHE_HOME"/trainbench/*.json "$OUT/tunespread-engines.json" 2>/dev/null
      unset XDG_CACHE_HOME ;;
    *) echo "unknown stage $stage" ;;
  esac
  echo "$stage: $(( $(date +%s) - t0 )) s"
  n=$((n + 1))
  pack "$n-$stage"
done
rmdir "$OUT"
