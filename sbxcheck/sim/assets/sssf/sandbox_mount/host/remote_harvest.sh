# shellcheck shell=bash
# Runs on the VM (ssh vm bash -s -- RUN_ID COMMIT_SHA). Prints one reply line:
# NOREPO | NOCOMMITS | BUNDLEFAIL | OK <tip_sha> <count>. The bundle goes to ~/.sbx-harvest.bundle.
set -uo pipefail
id=$1 base=$2
if ! cd "$HOME/app" 2> /dev/null || ! git rev-parse --git-dir > /dev/null 2>&1; then
  echo NOREPO
  exit 0
fi
ref=refs/heads/sbx/$id
if ! git rev-parse -q --verify "$ref" > /dev/null; then
  git update-ref "$ref" HEAD 2> /dev/null || { echo NOREPO; exit 0; }  # a ref only
fi
tip=$(git rev-parse "$ref")
full=$(git rev-parse -q --verify "$base^{commit}") || { echo BUNDLEFAIL; exit 0; }
[ "$tip" = "$full" ] && { echo NOCOMMITS; exit 0; }
count=$(git rev-list --count "$full..$ref")
out=$HOME/.sbx-harvest.bundle
rm -f "$out"
git bundle create "$out" "$base..$ref" > /dev/null 2>&1 || { echo BUNDLEFAIL; exit 0; }
echo "OK $tip $count"
