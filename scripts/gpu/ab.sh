#!/usr/bin/env bash
# ab.sh: an A/B (or A/B/C...) of environment settings on goccl bench runs,
# alternated round by round in one invocation so that drift hits every
# setting alike. Run from the repo root on the 2-GPU machine with binaries from
# scripts/gpu/build.sh:
#   AB_ROUNDS=2 bash scripts/gpu/ab.sh 'broadcast -b 128M -e 512M -f 2 -R 1' \
#     'off:GOCCL_TUNE=celand=0' 'on:'
# Each setting is LABEL:ENV=VALUE,... (commas inside a value as \,);
# GOCCL_GPU_BIN=DIR in a setting runs DIR/goccl instead of .gpu's, so that
# two builds can be compared ('old:GOCCL_GPU_BIN=.gpu-old' 'new:'). Prints,
# last, one line per (bench, setting, size): the rounds' in-place and
# out-of-place busbw, and logs every run under $OUT/ab.
set -u
. "$(dirname "$0")/env.sh" ab
args=$1
shift
rows=()
for round in $(seq 1 "${AB_ROUNDS:-2}"); do
  for setting in "$@"; do
    label=${setting%%:*}
    envs=()
    rest=${setting#*:}
    # Split on commas not preceded by a backslash.
    while [ -n "$rest" ]; do
      kv=$(printf '%s' "$rest" | sed -E 's/^((\\,|[^,])*).*/\1/')
      rest=${rest:${#kv}}
      rest=${rest#,}
      envs+=("$(printf '%s' "$kv" | sed 's/\\,/,/g')")
    done
    bin=$B
    for kv in "${envs[@]}"; do
      case $kv in GOCCL_GPU_BIN=*) bin=${kv#*=} ;; esac
    done
    log="$LOGS/$(echo "$args $label r$round" | tr -c 'A-Za-z0-9=._-' _).log"
    # shellcheck disable=SC2086
    env "${envs[@]}" timeout -k 5 120 "$bin/goccl" run -np 2 "$bin/goccl" bench $args --backend "${AB_BACKEND:-gpu}" -c 0 >"$log" 2>&1 \
      || { rows+=("$(printf '%-36s %-18s FAILED rc=%s' "$args" "$label" "$?")"); tail -5 "$log"; continue; }
    while read -r size oop ip; do
      rows+=("$(printf '%-36s %-18s %11s r%s  oop %7s  ip %7s GB/s' "$args" "$label" "$size" "$round" "$oop" "$ip")")
    done < <(grep -E '^ +[0-9]+ ' "$log" | awk '{print $1, $8, $12}')
  done
done
printf "%s\n" "${rows[@]}"
