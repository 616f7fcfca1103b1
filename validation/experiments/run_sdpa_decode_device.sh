#!/bin/bash
# The unseen SDPA grid (with its decode calls, head dims 64-256), then the decode fit set
# (sdpa_decode_device.py), in one device call.
# usage: bash validation/experiments/run_sdpa_decode_device.sh OUTDIR
exec bash "$(dirname "$0")/run_unseen_sdpa_then.sh" "$1" 330 sdpa_decode_device.py sdpa-decode.json
