#!/bin/bash
# Park the result folders outside the working tree for a device call, and bring them back.
#
# The device tool copies the working tree (tracked files) and refuses trees over 64 MiB;
# validation/results/ alone holds over 200 MB of traces and step data the device never needs.
# usage: bash validation/park_results.sh park [KEEP...]   move every results folder and report
#                                                         out of the tree but KEEP and the
#                                                         shipped calibrations (h100-sxm,
#                                                         h200-sxm: their files stay, their
#                                                         subfolders go)
#        bash validation/park_results.sh unpark          move them back
#        bash validation/park_results.sh status          what is parked, and the tree's size
# While folders are parked a pre-commit hook refuses every commit: a commit then would record
# the parked files as deleted (docs/development.md says what that cost once).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
GIT_DIR=$(git rev-parse --absolute-git-dir)
MARK="$GIT_DIR/gpumodel-parked"
PARK="${TMPDIR:-/tmp}/gpumodel-parked-$(printf '%s' "$ROOT" | cksum | cut -d' ' -f1)"
HOOK="$GIT_DIR/hooks/pre-commit"

tree_mb() {  # the tracked files present now, in MB (what the device tool copies)
  git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {printf "%.1f", s / 1e6}'
}

install_hook() {
  mkdir -p "$(dirname "$HOOK")"
  if [ -e "$HOOK" ] && ! grep -q gpumodel-parked "$HOOK"; then
    echo "note: $HOOK exists and is not ours; not replaced (commit nothing while parked)" >&2
    return
  fi
  cat >"$HOOK" <<EOF
#!/bin/sh
# installed by validation/park_results.sh
if [ -e "$MARK" ]; then
  echo "result folders are parked (validation/park_results.sh): unpark before committing" >&2
  exit 1
fi
EOF
  chmod +x "$HOOK"
}

park_one() {  # move validation/results/REL to the park, recorded in the marker
  local rel=${1#validation/results/}
  [ -e "$PARK/$rel" ] && { echo "$PARK/$rel exists: left in place" >&2; return; }
  mkdir -p "$(dirname "$PARK/$rel")"
  mv "$1" "$PARK/$rel"
  echo "$rel" >>"$MARK"
}

case "${1:-status}" in
  park)
    shift
    [ -e "$MARK" ] && { echo "already parked: run unpark first" >&2; exit 2; }
    keep=" h100-sxm h200-sxm $* "
    mkdir -p "$PARK"
    : >"$MARK"
    install_hook
    # every results folder but those kept; in a kept folder, its subfolders (the shipped
    # calibration files stay); the reports beside the folders but README.md
    for path in validation/results/*; do
      name=${path#validation/results/}
      [ "$name" = README.md ] && continue
      if [[ "$keep" == *" $name "* ]]; then
        for sub in "$path"/*/; do
          [ -d "$sub" ] && park_one "${sub%/}"
        done
        continue
      fi
      park_one "$path"
    done
    echo "parked $(wc -l <"$MARK") folders in $PARK; the tree is $(tree_mb) MB"
    ;;
  unpark)
    [ -e "$MARK" ] || { echo "nothing parked"; exit 0; }
    left=()
    while read -r name; do
      [ -n "$name" ] || continue
      if [ -e "validation/results/$name" ] || ! mv "$PARK/$name" "validation/results/$name"; then
        # (a kept folder's subfolder goes back into it; the folder itself never left)
        echo "validation/results/$name: not moved back from $PARK" >&2
        left+=("$name")
      fi
    done <"$MARK"
    if ((${#left[@]})); then  # the marker keeps what is still parked, and commits stay refused
      printf '%s\n' "${left[@]}" >"$MARK"
      exit 1
    fi
    rm -f "$MARK"
    find "$PARK" -depth -type d -empty -delete 2>/dev/null || true
    echo "unparked; the tree is $(tree_mb) MB"
    ;;
  status)
    if [ -e "$MARK" ]; then
      echo "parked in $PARK: $(tr '\n' ' ' <"$MARK")"
    else
      echo "nothing parked"
    fi
    echo "the tree is $(tree_mb) MB (the device tool takes up to 64 MiB)"
    ;;
  *)
    echo "usage: $0 park [KEEP...] | unpark | status" >&2
    exit 2
    ;;
esac
