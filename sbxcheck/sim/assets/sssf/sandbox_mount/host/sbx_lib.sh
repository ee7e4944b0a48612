# shellcheck shell=bash disable=SC2034  # the variables are for the recipes that source this
# Shared helpers for the just/sandbox recipes. Source it from the repo root.
#
# Secrets: the provisioning key is read from .env (else $OPENROUTER_PROVISIONING_KEY) into a
# shell variable and reaches curl only as a header on stdin (`-H @-`), never argv. Runtime keys
# live in .sandbox/runs/<id>.key (0600) and cross ssh only on stdin. Nothing here echoes a key.
#
# .sandbox/sim.env (optional, non-secret, written by the sbxcheck simulator) overrides where
# things are: SBX_SSH_CONFIG, SBX_KNOWN_HOSTS, SBX_OPENROUTER_URL, SBX_VM_OPENROUTER_URL,
# SBX_FILL_REPO, SBX_KNOBS, SBX_SSH_WAIT_S, SBX_PYTHON (the python3 that runs the stdlib-only
# host helpers, isolated: -I -S).

SBX_ROOT=$PWD
SBX_RUNS=$SBX_ROOT/.sandbox/runs
SBX_HOST_DIR=$SBX_ROOT/sandbox_mount/host
J=("${SBX_JUST:-just}" --justfile "$SBX_ROOT/justfile")
OR_URL=https://openrouter.ai/api/v1
VM_SUFFIX=.exe.xyz
EXE_HOST=exe.dev
SBX_SSH_OPTS=()
OR_STATUS=000
PROV_KEY=""

if [ -f "$SBX_ROOT/.sandbox/sim.env" ]; then
  # shellcheck disable=SC1091
  . "$SBX_ROOT/.sandbox/sim.env"
fi
RR=("${SBX_PYTHON:-python3}" -I -S "$SBX_HOST_DIR/run_record.py")
SJ=("${SBX_PYTHON:-python3}" -I -S "$SBX_HOST_DIR/sbx_json.py")
[ -n "${SBX_OPENROUTER_URL:-}" ] && OR_URL=${SBX_OPENROUTER_URL%/}
[ -n "${SBX_SSH_CONFIG:-}" ] && SBX_SSH_OPTS+=(-F "$SBX_SSH_CONFIG")
if [ -n "${SBX_KNOWN_HOSTS:-}" ]; then
  SBX_SSH_OPTS+=(-o "UserKnownHostsFile=$SBX_KNOWN_HOSTS" -o GlobalKnownHostsFile=/dev/null
    -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes)
fi

SBX_TMP=$(umask 077 && mktemp -d "${TMPDIR:-/tmp}/sbx.XXXXXX") || exit 1
trap 'rm -rf "$SBX_TMP"' EXIT
trap 'exit 143' TERM HUP
trap 'exit 130' INT

# sbx_ssh SECONDS HOST [COMMAND...]: one ssh call, killed after SECONDS (in our process group,
# so a runner that kills the recipe's group kills it too).
sbx_ssh() {
  local secs=$1
  shift
  timeout --foreground -k 5 "$secs" ssh "${SBX_SSH_OPTS[@]}" -o BatchMode=yes -o ConnectTimeout=5 \
    -o ServerAliveInterval=10 -o ServerAliveCountMax=3 "$@"
}

# sbx_quote ARGS...: the arguments as one shell-quoted string (for a remote command line).
sbx_quote() {
  local out="" a
  for a in "$@"; do out+="$(printf '%q' "$a") "; done
  printf '%s' "${out% }"
}

# sbx_prov_key: PROV_KEY from .env (else the environment); status 1 when it is unset.
sbx_prov_key() {
  local line value
  PROV_KEY=""
  if [ -f "$SBX_ROOT/.env" ]; then
    while IFS= read -r line || [ -n "$line" ]; do
      line=${line#export }
      case $line in
        OPENROUTER_PROVISIONING_KEY=*)
          value=${line#OPENROUTER_PROVISIONING_KEY=}
          value=${value%\"}; value=${value#\"}; value=${value%\'}; value=${value#\'}
          PROV_KEY=$value ;;
      esac
    done < "$SBX_ROOT/.env"
  fi
  [ -n "$PROV_KEY" ] || PROV_KEY=${OPENROUTER_PROVISIONING_KEY:-}
  [ -n "$PROV_KEY" ]
}

# or_call KEY METHOD PATH OUT [JSON]: one OpenRouter call; body to OUT, status in OR_STATUS.
or_call() {
  local key=$1 method=$2 path=$3 out=$4 data=${5-}
  local args=(-sS --noproxy '127.0.0.1,localhost' --connect-timeout 5 --max-time 20 -X "$method" -o "$out" -w '%{http_code}' -H @-)
  [ -n "$data" ] && args+=(-H 'Content-Type: application/json' --data-binary "$data")
  : > "$out"
  OR_STATUS=$(printf 'Authorization: Bearer %s\n' "$key" | curl "${args[@]}" "$OR_URL$path")
  [ -n "$OR_STATUS" ] || OR_STATUS=000
}

# or_list_keys OUT: every page of GET /keys (provisioning key) merged into OUT; 1 on failure.
or_list_keys() {
  local offset=0 n page pages=()
  while :; do
    page=$SBX_TMP/keys-page.$offset
    or_call "$PROV_KEY" GET "/keys?offset=$offset" "$page"
    case $OR_STATUS in 2??) ;; *) return 1 ;; esac
    n=$("${SJ[@]}" count < "$page") || return 1
    pages+=("$page")
    [ "$n" -ge 100 ] && [ "$offset" -lt 10000 ] || break
    offset=$((offset + 100))
  done
  "${SJ[@]}" merge "${pages[@]}" > "$1"
}

# or_first_page OUT: the first page of GET /keys only — what upstream's teardown gate reads (a key
# listed past the first page passes that gate; sbxcheck proves revocation over every page)
or_first_page() {
  or_call "$PROV_KEY" GET "/keys" "$SBX_TMP/keys-page.first"
  case $OR_STATUS in 2??) ;; *) return 1 ;; esac
  "${SJ[@]}" merge "$SBX_TMP/keys-page.first" > "$1"
}

# exe_ls OUT: `ssh exe.dev ls --json` into OUT; 1 when the call failed or printed no VM list.
exe_ls() {
  sbx_ssh 30 "$EXE_HOST" ls --json < /dev/null > "$1" 2> "$SBX_TMP/ls.err" || return 1
  "${SJ[@]}" live "" < "$1"
  [ $? -ne 2 ]
}

# sbx_knob NAME: the simulator's knob file content, if that knob is set (sim only).
sbx_knob() {
  [ -n "${SBX_KNOBS:-}" ] && [ -f "$SBX_KNOBS/$1" ] || return 1
  cat -- "$SBX_KNOBS/$1"
}

# sbx_shred FILE: shred -u, else rm -P, else rm -f.
sbx_shred() {
  [ -e "$1" ] || return 0
  shred -u -- "$1" 2> /dev/null || rm -P -- "$1" 2> /dev/null || rm -f -- "$1"
}
