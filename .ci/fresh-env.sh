#!/usr/bin/env bash
# .ci/fresh-env.sh: the documented commands, verbatim, the way a newcomer runs them on a fresh machine.
#
# Each step gets a fresh clone of what is committed (HEAD), a fresh venv (base install: no extras), a fresh
# HOME and a clean environment (env -i: only the system PATH plus that venv). Steps:
#   1. README.md's first "## Quick start" command (the main job): exit 0, no collection error;
#      then a base install (no extra) without an inventory: `pytest -m gate` is exit 4, one line;
#   2. the nightly example's (examples/ci/github-actions-nightly.yml) install and suite lines against a
#      `sbxcheck sim up` fleet named by SBXCHECK_INVENTORY (and SBXCHECK_REQUIRE_INVENTORY=1, as the
#      example's job sets), then its summary lines `sbxcheck report` / `sbxcheck history`; the junit,
#      metrics and Allure files it uploads must exist. The GitLab job's lines must be the same.
# Exit 0 only when every step passed. Logs: $FRESH_ENV_DIR (default: a temp dir), one per step.
# FRESH_ENV_STEPS="quickstart base nightly" (the default) picks the steps.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && git rev-parse --show-toplevel)
work=${FRESH_ENV_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/sbxcheck-fresh-env.XXXXXX")}
mkdir -p "$work"
step_timeout=${FRESH_ENV_TIMEOUT:-1200}
failed=0
steps=" ${FRESH_ENV_STEPS:-quickstart base nightly} "

# run_fresh NAME COMMAND [VAR=VALUE ...]: COMMAND in a fresh clone, venv and HOME under env -i.
run_fresh() {
  local name=$1 cmd=$2; shift 2
  local d=$work/$name
  rm -rf "$d"; mkdir -p "$d/home"
  git clone -q "$repo" "$d/repo" && python3 -m venv "$d/venv" || { echo "FAIL $name: clone or venv"; failed=1; return; }
  local t0=$SECONDS
  (cd "$d/repo" && env -i PATH="$d/venv/bin:/usr/local/bin:/usr/bin:/bin" HOME="$d/home" LANG=C.UTF-8 \
      TMPDIR="${TMPDIR:-/tmp}" VIRTUAL_ENV="$d/venv" "$@" timeout "$step_timeout" bash -c "$cmd") >"$d/out.log" 2>&1
  local rc=$?
  if grep -q 'ERROR collecting\|errors during collection' "$d/out.log"; then rc=${rc/#0/1}; fi
  local last; last=$(grep -E '[0-9]+ (passed|failed|errors?|skipped)' "$d/out.log" | tail -1 | tr -d '=')
  echo "$([ "$rc" -eq 0 ] && echo ok || echo FAIL) $name: exit $rc in $((SECONDS - t0))s:${last:+ $last} (log $d/out.log)"
  [ "$rc" -eq 0 ] || { failed=1; tail -40 "$d/out.log"; }
}

# 1. The README's first quick-start command, exactly as written (its trailing comment dropped).
first=$(awk '/^## Quick start/{q=1} q&&/^```/{n++; next} q&&n==1&&NF' "$repo/README.md" | head -1 | sed 's/[[:space:]]#.*$//')
[ -n "$first" ] || { echo "FAIL: no command under '## Quick start' in README.md"; exit 1; }
[[ $steps == *" quickstart "* ]] && run_fresh quickstart "$first"

# 1b. A base install (no [sim] extra) and no inventory: `pytest -m gate` is exit 4 and one line naming the extra.
base='pip install -q . && { pytest -m gate -p no:cacheprovider >gate.log 2>&1; rc=$?; cat gate.log;
  [ "$rc" -eq 4 ] && [ "$(grep -c . gate.log)" -eq 1 ] && grep -q "^ERROR: .*sbxcheck\[sim\]" gate.log; }'
[[ $steps == *" base "* ]] && run_fresh base "$base"

# 2. The nightly example's install and suite lines (a `run: >-` block is one line), verbatim.
read_lines() {  # FILE: the install line and the pytest line of a CI example, one per output line
  python3 - "$1" <<'EOF'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
install = re.search(r"^\s*(?:run:|-)\s*(python -m pip install -e \.)\s*$", text, re.M).group(1)
block = re.search(r"^(\s*)(?:run:|-) >-\n((?:\1\s+python -m pytest.*\n)(?:\1\s+--.*\n)*)", text, re.M).group(2)
print(install)
print(" ".join(line.strip() for line in block.splitlines()))
EOF
}
mapfile -t gh < <(read_lines "$repo/examples/ci/github-actions-nightly.yml")
mapfile -t gl < <(read_lines "$repo/examples/ci/gitlab-ci.yml")
if [[ $steps != *" nightly "* ]]; then
  :
elif [ ${#gh[@]} -ne 2 ] || [ "${gh[*]}" != "${gl[*]}" ]; then
  echo "FAIL nightly: cannot read the examples' install + suite lines, or GitHub's and GitLab's differ"
  printf '  %s\n' "${gh[@]}" "${gl[@]}"; failed=1
else
  fleet=$work/nightly-fleet
  # the fleet stands in for a real one: served from its own venv with the [sim] extra, so the suite's
  # venv is the example's base install (which has no simulator)
  sim="../sim-venv/bin/sbxcheck sim"
  nightly="${gh[0]} && python -m venv ../sim-venv && ../sim-venv/bin/pip install -q '.[sim]' \
&& $sim up --dir $fleet >/dev/null && { ${gh[1]}; rc=\$?; $sim down --dir $fleet >/dev/null; } \
&& sbxcheck report sbxcheck-report && sbxcheck history .sbxcheck/history \
&& test -s sbxcheck-report/pytest-junit.xml && test -s sbxcheck-report/sbxcheck.prom \
&& test -n \"\$(ls allure-results)\" && exit \$rc"
  run_fresh nightly "$nightly" SBXCHECK_INVENTORY="$fleet/sbxcheck.toml" SBXCHECK_REQUIRE_INVENTORY=1
fi
exit $failed
