# Sourced by scripts/serve and scripts/test: find or create the virtualenv and install the
# pinned dependency set into it. Not meant to be run on its own.
#
#   AGP_VENV   an existing virtualenv to use instead of .venv (it is never created, and the
#              project itself is not installed into it: the scripts run from the checkout).
#   AGP_PYTHON the interpreter that creates .venv (default: python3.11).

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [ -n "${AGP_VENV:-}" ]; then
  VENV="$(cd "$AGP_VENV" && pwd)" || { echo "AGP_VENV=$AGP_VENV is not a directory" >&2; exit 1; }
  OWN_VENV=0
else
  VENV="$ROOT/.venv"
  OWN_VENV=1
  if [ ! -x "$VENV/bin/python" ]; then
    PY="${AGP_PYTHON:-python3.11}"
    command -v "$PY" >/dev/null 2>&1 || { echo "$PY not found: AGP needs Python 3.11" >&2; exit 1; }
    echo "==> creating $VENV with $PY"
    "$PY" -m venv "$VENV"
  fi
fi
[ -x "$VENV/bin/python" ] || { echo "$VENV has no bin/python" >&2; exit 1; }

# Install only when the pinned set changed since the last install into this venv: a
# repeated start is instant, and a fresh machine gets exactly requirements.lock.
if [ "$OWN_VENV" = 1 ]; then
  stamp_input="$(cat requirements.lock pyproject.toml; echo "editable=$ROOT")"
else
  stamp_input="$(cat requirements.lock)"
fi
stamp="$(printf '%s' "$stamp_input" | sha256sum | cut -d' ' -f1)"
# Two stamps: what the checkout's own start installed (the pinned set and the project), and
# what a start with AGP_VENV needs (the pinned set). A run with AGP_VENV pointing at .venv
# (the tests' scripts/serve does) must not overwrite the first, or the next plain start
# would install everything again.
deps_stamp="$(printf '%s' "$(cat requirements.lock)" | sha256sum | cut -d' ' -f1)"
if [ "$OWN_VENV" = 1 ]; then stamp_file="$VENV/.agp-install-stamp"; else stamp_file="$VENV/.agp-install-stamp-deps"; fi
if [ "$(cat "$stamp_file" 2>/dev/null)" != "$stamp" ]; then
  echo "==> installing the pinned dependencies into $VENV"
  pip_log="$(mktemp)"
  # pip's chatter goes to a log that is shown only when the install fails.
  if ! { "$VENV/bin/python" -m pip install --disable-pip-version-check -r requirements.lock &&
         if [ "$OWN_VENV" = 1 ]; then
           "$VENV/bin/python" -m pip install --disable-pip-version-check --no-deps -e .
         fi; } >"$pip_log" 2>&1; then
    cat "$pip_log" >&2
    rm -f "$pip_log"
    echo "installing the dependencies failed" >&2
    exit 1
  fi
  rm -f "$pip_log"
  printf '%s\n' "$stamp" > "$stamp_file"
  printf '%s\n' "$deps_stamp" > "$VENV/.agp-install-stamp-deps"
fi


# The checkout comes first on the path, whichever venv runs it.
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$VENV/bin:$PATH"
