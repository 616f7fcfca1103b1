# Sourced by the whole-step device scripts (validation/unseen/run_device.sh,
# validation/fitset/run_device.sh), with OUT set. step_env FILE: writes the machine, its GPU and
# the torch/transformers versions to FILE and appends them to $OUT/log.txt. It also sets what
# every step run needs: unbuffered Python, and TEARDOWN_CUPTI=1 (torch.profiler leaves CUPTI
# attached after a session unless it is set, and every eager step after it pays 16-27% more host
# time: validation/results/h200-sxm/process-state-2026-11-25; the users these workloads stand
# for do not run a profiler before their steps).
export PYTHONUNBUFFERED=1 TEARDOWN_CUPTI=1
step_env() {
  {
    date -u; hostname; nvidia-smi; nproc; python3 --version
    lscpu | grep -E 'Model name|^CPU\(s\)|Hypervisor|Core\(s\)|Thread'
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
    python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  } >"$1" 2>&1
  cat "$1" >>"$OUT/log.txt"
}
# multi_gpu_env FILE: step_env, NVLink multicast off (the device's KINDS.md: a program that uses
# it can take the host's GPUs out of service), and the GPUs' topology and NCCL's version in FILE.
multi_gpu_env() {
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  step_env "$1"
  nvidia-smi topo -m >>"$1" 2>&1
  python3 -c "import torch; print('nccl', torch.cuda.nccl.version())" >>"$1" 2>&1
}
