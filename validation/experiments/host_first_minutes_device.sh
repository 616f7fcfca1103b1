#!/bin/bash
# Is a fresh VM's host slow in its first minutes, and is it CPU steal? (docs/llm.md, "Not in a
# fresh VM's first minutes"). One device call: /proc/stat's aggregate CPU line and a fixed
# pure-Python loop's time sampled every second in the background, while
# `gpumodel validate --host-only` measures the host three times in a row, each in a fresh
# process. Writes to $1 (the device's $OUT): stat.csv (t_s, steal/user/system/idle jiffies, the
# loop's ms), host-1..3.yaml, log.txt: five files.
# usage: bash validation/experiments/host_first_minutes_device.sh OUTDIR [WINDOW_S]
set -u
OUT=$1
WINDOW=${2:-30}
START=$(date +%s.%N)
python3 - "$OUT/stat.csv" <<'PY' &
import sys, time
out = open(sys.argv[1], "w", buffering=1)
out.write("t_s,user,nice,system,idle,iowait,irq,softirq,steal,loop_ms\n")
t0 = time.time()
while True:
    with open("/proc/stat") as f:
        cpu = f.readline().split()[1:9]
    a = time.perf_counter()
    x = 0
    for i in range(200_000):  # a fixed pure-Python loop: the vCPU's speed now
        x += i * i
    loop_ms = (time.perf_counter() - a) * 1e3
    out.write(f"{time.time() - t0:.2f},{','.join(cpu)},{loop_ms:.3f}\n")
    time.sleep(max(0.0, 1.0 - loop_ms / 1e3))
PY
SAMPLER=$!
{ date -u; uptime; nproc; grep -m1 "model name" /proc/cpuinfo; } > "$OUT/log.txt"
for i in 1 2 3; do
  echo "=== profile $i at $(python3 -c "import time; print(round(time.time() - $START, 1))") s" >> "$OUT/log.txt"
  python3 -m gpumodel validate --host-only --host-window "$WINDOW" --host-out "$OUT/host-$i.yaml" \
    >> "$OUT/log.txt" 2>&1
done
kill $SAMPLER
echo "done at $(python3 -c "import time; print(round(time.time() - $START, 1))") s" >> "$OUT/log.txt"
