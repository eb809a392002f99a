# Sourced by the other scripts: creates or updates .venv with the project and its extras.
# Idempotent: reinstalls only when setup.py, constraints.txt or this script changed since the
# last install. The versions installed are those of constraints.txt (the ones the tests run).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
STAMP="$VENV/.tb-wur-installed"
WANT="$(cat "$ROOT/setup.py" "$ROOT/constraints.txt" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)"
# pip's settings of this machine (its indexes, find-links and constraint files, from its
# configuration files and PIP_* variables) as uv's options
uv_options_from_pip() {
  "$VENV/bin/python" -m pip config list 2>/dev/null | while IFS= read -r line; do
    key="${line%%=*}"; value="${line#*=}"; value="${value#\'}"; value="${value%\'}"
    case "${key##*.}" in
      index-url) option="--default-index" ;;
      extra-index-url) option="--extra-index-url" ;;
      find-links) option="--find-links" ;;
      constraint) option="--constraint" ;;
      *) continue ;;
    esac
    for item in $value; do printf '%s\n%s\n' "$option" "$item"; done
  done
}
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  # pip's and setuptools' chatter (the editable build's banners, this machine's warning about
  # a missing local index) goes to a log, shown only when the install fails
  LOG="$VENV/install.log"
  EXTRAS="$ROOT[test,demo,torch,jax,tensorflow]"
  # uv where pip can install it (a minute quicker: it unpacks and compiles in parallel, where
  # pip compiles every module on one core), with pip's settings and the same pins; else pip
  if { "$VENV/bin/python" -m pip install --quiet -c "$ROOT/constraints.txt" uv &&
       mapfile -t UV_OPTIONS < <(uv_options_from_pip) &&
       "$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" --compile-bytecode \
         --index-strategy unsafe-best-match "${UV_OPTIONS[@]}" \
         -c "$ROOT/constraints.txt" -e "$EXTRAS"; } >"$LOG" 2>&1; then
    :
  elif ! { echo "scripts/env.sh: uv did not install; pip instead" &&
           "$VENV/bin/python" -m pip install --quiet --upgrade pip setuptools wheel &&
           "$VENV/bin/python" -m pip install --quiet -c "$ROOT/constraints.txt" -e "$EXTRAS"
         } >>"$LOG" 2>&1; then
    cat "$LOG" >&2
    echo "scripts/env.sh: installing into $VENV failed (log above, kept in $LOG)" >&2
    exit 1
  fi
  echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
cd "$ROOT"
