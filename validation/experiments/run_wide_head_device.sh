#!/bin/bash
# The unseen SDPA grid (it times the backward of training shapes, head dims 64-256), then the
# wide-head fit set (sdpa_wide_head_device.py), in one device call.
# usage: bash validation/experiments/run_wide_head_device.sh OUTDIR
exec bash "$(dirname "$0")/run_unseen_sdpa_then.sh" "$1" 260 sdpa_wide_head_device.py sdpa-wide-head.json
