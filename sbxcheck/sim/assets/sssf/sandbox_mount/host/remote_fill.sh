# shellcheck shell=bash
# Runs on the VM (ssh vm bash -s -- REPO RUN_ID [PIN]): clone or fetch ~/app, check out the pin,
# switch to sbx/<run-id>. Last line: "<head_sha> <intended_sha>". Exit 3: the pin does not resolve.
set -uo pipefail
repo=$1 id=$2 pin=${3:-}
export GIT_TERMINAL_PROMPT=0
cd "$HOME" || exit 1
if [ -d app/.git ]; then
  git -C app fetch -q origin || { echo "fill: git fetch failed" >&2; exit 1; }
  if [ -z "$pin" ]; then
    upstream=$(git -C app rev-parse --abbrev-ref origin/HEAD 2> /dev/null || echo origin/main)
    git -C app checkout -q "${upstream#origin/}" && git -C app merge -q --ff-only "$upstream" \
      || echo "fill: warning: ${upstream#origin/} did not fast-forward" >&2
  fi
else
  [ -e app ] && rm -rf app
  git clone -q "$repo" app || { echo "fill: git clone failed" >&2; exit 1; }
fi
cd app || exit 1
if [ -n "$pin" ]; then
  intended=$(git rev-parse -q --verify "$pin^{commit}" || git rev-parse -q --verify "origin/$pin^{commit}") \
    || exit 3
else
  intended=$(git rev-parse -q --verify HEAD) || { echo "fill: no HEAD after the clone" >&2; exit 1; }
fi
branch=sbx/$id
if git show-ref -q --verify "refs/heads/$branch"; then
  git checkout -q "$branch" || exit 1
  git merge -q --ff-only "$intended" 2> /dev/null || echo "fill: warning: $branch did not fast-forward" >&2
else
  git checkout -q -b "$branch" "$intended" || exit 1
fi
echo "$(git rev-parse HEAD) $intended"
