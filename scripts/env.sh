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
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  # pip's and setuptools' chatter (the editable build's banners, this machine's warning about
  # a missing local index) goes to a log, shown only when the install fails
  LOG="$VENV/install.log"
  if ! { "$VENV/bin/python" -m pip install --quiet --upgrade pip setuptools wheel &&
         "$VENV/bin/python" -m pip install --quiet -c "$ROOT/constraints.txt" \
           -e "$ROOT[test,demo,torch,jax,tensorflow]"; } >"$LOG" 2>&1; then
    cat "$LOG" >&2
    echo "scripts/env.sh: installing into $VENV failed (log above, kept in $LOG)" >&2
    exit 1
  fi
  echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
cd "$ROOT"
