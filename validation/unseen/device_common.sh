# Sourced by the kernel device scripts (run_kernels_device.sh, run_conv_refit_device.sh), with OUT
# set: writes the machine's env.txt into $OUT and defines step, which logs a command and the
# tail of its output into $OUT/log.txt, and unseen_sdpa (the host profile, then the unseen SDPA
# grid; ROOT set by the caller).
# the profiler's CUPTI stays attached after a session unless told otherwise, and slows every
# eager call after it (validation/results/h200-sxm/process-state-2026-11-25)
export TEARDOWN_CUPTI=1 PYTHONUNBUFFERED=1
{
  date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
  lscpu | grep -E 'Model name|^CPU\(s\)|Hypervisor|L3'; python3 --version
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())"
} >"$OUT/env.txt" 2>&1
step() { echo "=== $* at $(date -u +%T)" | tee -a "$OUT/log.txt"; "$@" 2>&1 | tail -40 >>"$OUT/log.txt"; }
# unseen_sdpa SECONDS: this machine's host profile (host-before.yaml), then kernels_unseen.py's
# SDPA grid within SECONDS (unseen.json, nvml_samples.json), into $OUT
unseen_sdpa() {
  step python3 -m gpumodel validate --host-only --host-window 20 --host-out "$OUT/host-before.yaml"
  local w
  w=$(mktemp -d)
  step timeout "$1" python3 "$ROOT/validation/unseen/kernels_unseen.py" --families sdpa --out "$w/k"
  mv "$w/k/unseen.json" "$w/k/nvml_samples.json" "$OUT/"
}
