# shellcheck shell=bash
# Runs on the VM (ssh vm bash -s -- [BASE_URL]): write ~/.pi/agent/models.json from the template,
# baking in the key from app/.env by string substitution (never argv), and check pi is on PATH.
set -uo pipefail
base=${1:-}
cd "$HOME" || exit 1
[ -d app ] || { echo "[provision] FAILED: no ~/app — FILL never ran"; exit 1; }
tmpl=app/sandbox_mount/guest/models.json.tmpl
[ -f "$tmpl" ] || { echo "[provision] FAILED: missing $tmpl"; exit 1; }
key=""
if [ -f app/.env ]; then
  while IFS= read -r line || [ -n "$line" ]; do
    line=${line#export }
    case $line in OPENROUTER_API_KEY=*) key=${line#OPENROUTER_API_KEY=} ;; esac
  done < app/.env
  key=${key%\"}; key=${key#\"}; key=${key%\'}; key=${key#\'}
fi
doc=$(< "$tmpl")
if [ -n "$key" ]; then
  doc=${doc//env:OPENROUTER_API_KEY/"$key"}
else
  echo "[provision] no OPENROUTER_API_KEY in .env — leaving the env: placeholder"
fi
[ -n "$base" ] && doc=${doc//https:\/\/openrouter.ai\/api\/v1/"$base"}
mkdir -p .pi/agent || exit 1
(umask 077 && printf '%s\n' "$doc" > .pi/agent/models.json.tmp) || exit 1
chmod 600 .pi/agent/models.json.tmp && mv -f .pi/agent/models.json.tmp .pi/agent/models.json || exit 1
echo "[provision] wrote ~/.pi/agent/models.json"
command -v pi > /dev/null || { echo "[provision] FAILED: pi is not on PATH"; exit 1; }
echo "[provision] pi on PATH: $(command -v pi)"
