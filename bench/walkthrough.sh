#!/usr/bin/env bash
# A new user's walk through the README: every command of its command table, run as written on
# the bundled files, in a scratch directory. Prints each command, the first lines of its output,
# its exit code and wall time; the last line counts unexpected exit codes. Recorded output:
# bench/results/walkthrough.txt (`bash bench/walkthrough.sh | tee bench/results/walkthrough.txt`).
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
W="$(mktemp -d)"; cd "$W"
I="$ROOT/instances"
run() {  # expected-exit-code command...
  local want="$1"; shift
  echo "\$ $*"
  local t0=$(date +%s.%N)
  "$@" > out.txt 2>&1; local rc=$?
  local t1=$(date +%s.%N)
  head -n "${LINES_SHOWN:-6}" out.txt | sed 's/^/    /'
  printf '    -> exit %s (expected %s), %.1f s\n' "$rc" "$want" "$(echo "$t1 - $t0" | bc)"
  [ "$rc" = "$want" ] || { echo "    !! UNEXPECTED EXIT"; FAIL=$((FAIL+1)); }
}
FAIL=0
run 0 paraplan --version
run 0 paraplan plan "$I/small-gpt-16xA100.yaml" -o plan.yaml
run 0 paraplan plan "$I/small-gpt-16xA100.yaml" --json
run 0 paraplan plan "$I/small-gpt-16xA100.yaml" --backend cpsat
run 0 paraplan plan "$I/small-gpt-16xA100.yaml" --backend milp
run 0 paraplan plan "$I/small-gpt-16xA100.yaml" --sensitivity
run 0 paraplan simulate "$I/small-gpt-16xA100.yaml" --plan plan.yaml
run 0 paraplan exhaustive "$I/tiny-gpt-8xA100.yaml"
run 0 paraplan verify "$I/tiny-gpt-8xA100.yaml"
run 0 paraplan bench --quick
run 0 paraplan plan --hf-config "$ROOT/tests/data/hf/llama-3-8b/config.json" --cluster "$I/clusters/dgx-h100-32nodes.yaml" --job "$I/jobs/pretrain-4m-tokens.yaml" -o hfplan.yaml
run 0 paraplan export plan.yaml --to megatron
run 0 paraplan export hfplan.yaml --to torchtitan
run 0 paraplan export hfplan.yaml --to deepspeed
run 0 paraplan report "$I/small-gpt-16xA100.yaml" -o report.html --plan plan.yaml
run 0 paraplan plan "$I/small-gpt-16xA100.yaml" --top 3 --within 5
run 0 paraplan plan "$I/small-gpt-16xA100.yaml" --top 2 -o top.yaml
run 0 paraplan compare top-1.yaml top-2.yaml --instance "$I/small-gpt-16xA100.yaml"
run 0 paraplan memory "$I/small-gpt-16xA100.yaml"
run 0 paraplan accuracy
run 0 paraplan sweep "$I/sweeps/example.yaml" --workers 2 -o results.csv
run 0 paraplan calibrate --sweeps 1
run 0 paraplan partition "$I/small-gpt-16xA100.yaml" --tp 4
run 0 paraplan plan "$I/mixed/tiny-2types.yaml" -o hplan.yaml
run 0 paraplan simulate "$I/mixed/tiny-2types.yaml" --plan hplan.yaml
run 0 paraplan plan "$I/mixed/llama3-8b-dynamic.yaml" --robust
run 0 paraplan plan "$I/mixed/llama3-8b-dynamic.yaml" --expected
paraplan plan "$I/mixed/llama3-70b-3types-2sites.yaml" -o cur.yaml > /dev/null 2>&1
run 0 paraplan replan "$I/mixed/llama3-70b-3types-2sites.yaml" --plan cur.yaml --event "$I/mixed/events/inter-site-degraded.yaml"
run 0 paraplan timeline "$I/mixed/llama3-8b-dynamic.yaml"
run 0 paraplan bench --mixed
echo "walk-through: $FAIL unexpected exit codes"
