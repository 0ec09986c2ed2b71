#!/usr/bin/env bash
# trainbench on a real Slurm (Debian's slurm-wlm + munge), a one-node cluster
# started here on the loopback and stopped afterwards (cluster.sh):
#  1. `trainbench slurm submit` turns a 2 x 2 experiment into a job array
#     (held); one task is cancelled while pending, one while running;
#  2. gather: the finished cells are in OUT/results.json, the cancelled
#     ones failed with Slurm's reason;
#  3. a resubmission runs only the missing cells; gathered again, every cell
#     is ok and the speedups are computed across tasks.
#   slurm_test.sh BUILD_DIR DATA_DIR [METRICS]   (METRICS: ON unless the build has no exporter)
set -euo pipefail
BUILD=$1; DATA=$2; METRICS=${3:-ON}
for tool in slurmctld slurmd munged sbatch; do
  command -v "$tool" > /dev/null || [ -x "/usr/sbin/$tool" ] || { echo "skipped: $tool not installed (Debian: slurmctld slurmd slurm-client munge)"; exit 77; }
done
export PATH=$PATH:/usr/sbin
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
trap '"$HERE/cluster.sh" stop "$TMP/cluster"; rm -rf "$TMP"' EXIT
"$HERE/cluster.sh" start "$TMP/cluster"
source "$TMP/cluster/env.sh"
TB=$BUILD/bin/trainbench
cat > "$TMP/exp.yaml" <<YAML
name: slurm-test
seed: 4
dataset: {kind: cifar10, path: $DATA, train_size: 512, test_size: 100}
models: [simple_cnn, resnet18]
devices:
  - {plugin: cpu, label: one, options: {threads: 1}}
  - {plugin: cpu, label: two, options: {threads: 2}}
training: {epochs: 3, batch_size: 64}
measurement: {warmup_steps: 1, baseline: one}
YAML
OUT=$TMP/out
fail() { echo "FAIL: $*"; for f in "$OUT"/slurm/task-*.out; do echo "== $f"; tail -5 "$f"; done; exit 1; }
wait_state() {  # TASK STATE
  for _ in $(seq 1 120); do
    # Output kept first: `| grep -q` under pipefail can fail when the writer gets SIGPIPE.
    queue=$(squeue -h -r -o '%i %T')
    grep -qx "$1 $2" <<< "$queue" && return 0
    sleep 0.5
  done
  fail "task $1 never reached $2: $(squeue -r)"
}

"$TB" slurm submit "$TMP/exp.yaml" --out "$OUT" --hold > "$TMP/submit1.log" 2>&1 || { cat "$TMP/submit1.log"; exit 1; }
JOB=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["job_id"])' "$OUT/slurm/jobs.json")
grep -q "submitted 4 cell(s) in 1 job(s)" "$TMP/submit1.log" || fail "$(cat "$TMP/submit1.log")"
grep -q "^#SBATCH --array=0,1,2,3$" "$OUT"/slurm/job-0-0gpu.sh || fail "array line: $(cat "$OUT"/slurm/job-0-0gpu.sh)"
scancel "${JOB}_1"                      # cancelled while pending
scontrol release "$JOB"
wait_state "${JOB}_2" RUNNING
sleep 3
scancel "${JOB}_2"                      # cancelled while running
"$TB" slurm gather "$TMP/exp.yaml" --out "$OUT" --wait > "$TMP/gather1.log" 2>&1 && fail "gather with failed cells exited 0"
cat "$TMP/gather1.log"
python3 - "$OUT/results.json" "$JOB" <<'PY'
import json, sys
cells = json.load(open(sys.argv[1]))["cells"]
job = sys.argv[2]
status = [c["status"] for c in cells]
assert status == ["ok", "failed", "failed", "ok"], status
assert f"Slurm task {job}_1" in cells[1]["reason"], cells[1]["reason"]
assert "CANCELLED" in cells[2]["reason"], cells[2]["reason"]
assert cells[0]["slurm"] == {"job_id": job, "array_task_id": 0}, cells[0]
PY

# The resubmitted tasks serve /metrics on free ports and announce themselves
# with Prometheus file_sd target files, found here as Prometheus would (in a
# build with the exporter).
SD_ARGS=(); [ "$METRICS" = ON ] && SD_ARGS=(--metrics-file-sd "$TMP/targets")
mkdir -p "$TMP/targets"
"$TB" slurm submit "$TMP/exp.yaml" --out "$OUT" "${SD_ARGS[@]}" > "$TMP/submit2.log" 2>&1 \
  || { cat "$TMP/submit2.log"; fail "resubmission"; }
if [ "$METRICS" = ON ]; then
  found=""
  for _ in $(seq 1 240); do
    for f in "$TMP"/targets/*.json; do
      [ -f "$f" ] || continue
      target=$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))[0]; assert t["labels"]["slurm_job_id"]; print(t["targets"][0].replace(t["labels"]["host"], "127.0.0.1"))' "$f") || continue
      page=$(curl -sf "http://$target/metrics") || continue
      if grep -q '^trainbench_info{' <<< "$page"; then found=$target; break 2; fi
    done
    sleep 0.25
  done
  [ -n "$found" ] || fail "no task's /metrics found through $TMP/targets"
  echo "a running task's metrics answered at $found (file_sd target)"
fi
"$TB" slurm gather "$TMP/exp.yaml" --out "$OUT" --wait >> "$TMP/submit2.log" 2>&1 || { cat "$TMP/submit2.log"; fail "gather 2"; }
cat "$TMP/submit2.log"
[ -z "$(ls -A "$TMP/targets")" ] || fail "target files left behind: $(ls "$TMP/targets")"
grep -q "submitted 2 cell(s) in 1 job(s)" "$TMP/submit2.log" || fail "resubmission did not submit exactly the 2 missing cells"
grep -q "^#SBATCH --array=1,2$" "$OUT"/slurm/job-1-0gpu.sh || fail "resubmitted array: $(cat "$OUT"/slurm/job-1-0gpu.sh)"
python3 - "$OUT/results.json" "$JOB" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
cells = doc["cells"]
assert [c["status"] for c in cells] == ["ok"] * 4, [(c["status"], c.get("reason")) for c in cells]
assert cells[0]["slurm"]["job_id"] == sys.argv[2]      # kept from the first submission
assert cells[1]["slurm"]["job_id"] != sys.argv[2]      # rerun by the second
for i in (1, 3):                                       # speedup of 'two' over 'one', across tasks
    assert isinstance(cells[i]["speedup"], float) and cells[i]["speedup"] > 0, cells[i]
assert doc["system"]["hostname"]
print("slurm: ok;", ", ".join(f"{c['model']}/{c['device']} {c['samples_per_second']:.0f}/s" for c in cells))
PY

# 4. GPU cells: `gpus: N` cells go out as --gres=gpu:N arrays and run on the
#    node's two GPUs (GRES, cluster.sh). The tasks use the GPUs Slurm gave
#    them, whatever indices the config names (a stand-in device, which
#    fails as CUDA would when its device_index is not visible to it).
PLUGINS=$BUILD/tests/test_plugins
TWO=""
"$BUILD/bin/trainbench-worker" info | grep -q '"gloo"' && TWO="  - {plugin: gpu_stand_in, label: two-gpus, gpus: 2}"
cat > "$TMP/gpu.yaml" <<YAML
name: slurm-gpu-test
seed: 4
dataset: {kind: cifar10, path: $DATA, train_size: 256, test_size: 100}
models: [simple_cnn]
devices:
  - {plugin: gpu_stand_in, label: second-gpu, gpus: [1]}
  - {plugin: gpu_stand_in, label: one-gpu, gpus: 1}
$TWO
training: {epochs: 2, batch_size: 64}
measurement: {warmup_steps: 1, baseline: one-gpu}
YAML
OUT=$TMP/out-gpu
"$TB" slurm submit "$TMP/gpu.yaml" --out "$OUT" --plugin-dir "$PLUGINS" > "$TMP/submit-gpu.log" 2>&1 \
  || { cat "$TMP/submit-gpu.log"; fail "GPU submission"; }
grep -q "^#SBATCH --gres=gpu:1$" "$OUT"/slurm/job-0-1gpu.sh || fail "1-GPU job: $(cat "$OUT"/slurm/job-0-1gpu.sh)"
grep -q "^#SBATCH --array=0,1$" "$OUT"/slurm/job-0-1gpu.sh || fail "1-GPU array: $(cat "$OUT"/slurm/job-0-1gpu.sh)"
if [ -n "$TWO" ]; then
  grep -q "^#SBATCH --gres=gpu:2$" "$OUT"/slurm/job-1-2gpu.sh || fail "2-GPU job: $(ls "$OUT"/slurm)"
fi
"$TB" slurm gather "$TMP/gpu.yaml" --out "$OUT" --plugin-dir "$PLUGINS" --wait > "$TMP/gather-gpu.log" 2>&1 \
  || { cat "$TMP/gather-gpu.log"; fail "GPU gather"; }
cat "$TMP/gather-gpu.log"
python3 - "$OUT/results.json" "$TWO" <<'PY'
import json, sys
cells = json.load(open(sys.argv[1]))["cells"]
assert [c["status"] for c in cells] == ["ok"] * len(cells), [(c["status"], c.get("reason")) for c in cells]
for c in cells:
    given = c["slurm"]["job_gpus"]                      # what Slurm gave the task
    hw = c["hardware"]
    assert hw["cuda_visible_devices"] == given, (given, hw)
    assert hw["device_index"] == 0, hw                  # rank 0 on the job's first GPU
    assert len(given.split(",")) == c.get("ranks", 1), (given, c.get("ranks"))
    assert set(given.split(",")) <= {"0", "1"}, given
if sys.argv[2]:
    assert cells[2]["ranks"] == 2 and cells[2]["slurm"]["job_gpus"] == "0,1", cells[2]
print("slurm GPUs: ok;", ", ".join(f"{c['device']} on GPU {c['slurm']['job_gpus']}" for c in cells))
PY
