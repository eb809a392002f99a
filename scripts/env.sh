# Sourced by the other scripts: creates or updates .venv with the project and its extras.
# Idempotent: reinstalls only when setup.py or this script changed since the last install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
STAMP="$VENV/.tb-wur-installed"
WANT="$(cat "$ROOT/setup.py" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  # (this machine's pip configuration warns about a missing local index: not shown)
  "$VENV/bin/python" -m pip install --quiet --upgrade pip setuptools wheel \
    2> >(grep -v "^WARNING: Location" >&2)
  "$VENV/bin/python" -m pip install --quiet -e "$ROOT[test,demo,torch,jax,tensorflow]" \
    2> >(grep -v "^WARNING: Location" >&2)
  echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
cd "$ROOT"
