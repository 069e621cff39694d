# Python 2.7 virtualenvs for the conformance suites that are Python 2 code (the SockJS protocol
# suite, the Autobahn|Testsuite). Sourced by scripts/sockjs-conformance.sh and
# scripts/autobahn.sh; defines functions only.
#
# Python 2 has no venv module, so the virtualenvs are made with virtualenv 20.15.1 (the last
# that runs on 2.7), installed once with `pip install --target` into
# ${XDG_CACHE_HOME:-~/.cache}/herald/virtualenv-py27 from
# scripts/sockjs-conformance/virtualenv-requirements.txt, its dependencies pinned.
#
# Callers define `die MESSAGE` and `step MESSAGE`.

PY27_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY27_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/herald"
PY27_VENV_TOOLS="$PY27_CACHE/virtualenv-py27"
PY27_VENV_TOOLS_REQUIREMENTS="$PY27_ROOT/scripts/sockjs-conformance/virtualenv-requirements.txt"

# The Python 2.7 interpreter: $PYTHON2, else pyenv's 2.7.x, else python2.7 on PATH.
find_python2() {
    local candidate
    if [ -n "${PYTHON2:-}" ]; then
        printf '%s\n' "$PYTHON2"
        return
    fi
    if command -v pyenv >/dev/null 2>&1; then
        for candidate in "$(pyenv root)"/versions/2.7*/bin/python; do
            [ -x "$candidate" ] && { printf '%s\n' "$candidate"; return; }
        done
    fi
    for candidate in "$HOME"/.pyenv/versions/2.7*/bin/python "$(command -v python2.7 || true)"; do
        [ -n "$candidate" ] && [ -x "$candidate" ] && { printf '%s\n' "$candidate"; return; }
    done
    die "Python 2.7 not found: set PYTHON2, or install it (pyenv install 2.7.18)"
}

# ensure_py27_venv VENV IMPORTS REQUIREMENTS...
# Makes VENV with Python 2.7 and installs the REQUIREMENTS files into it, unless it already has
# exactly those pins (a stamp holds their hash and the interpreter's version); then checks that
# `import IMPORTS` works in it.
ensure_py27_venv() {
    local venv=$1 imports=$2 python2 stamp want
    shift 2
    python2=$(find_python2)
    "$python2" -c 'import sys; sys.exit(sys.version_info[:2] != (2, 7))' \
        || die "$python2 is not Python 2.7"
    stamp="$venv/.herald-requirements.sha256"
    want=$( { cat "$@" "$PY27_VENV_TOOLS_REQUIREMENTS"; "$python2" -V 2>&1; } \
        | sha256sum | cut -d' ' -f1)
    if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && [ -x "$venv/bin/python" ]; then
        return
    fi
    step "preparing the Python 2.7 virtualenv at $venv"
    if [ ! -f "$PY27_VENV_TOOLS/.installed" ] \
        || ! cmp -s "$PY27_VENV_TOOLS_REQUIREMENTS" "$PY27_VENV_TOOLS/.installed"; then
        rm -rf "$PY27_VENV_TOOLS"
        "$python2" -m pip install -q --no-warn-script-location --target "$PY27_VENV_TOOLS" \
            -r "$PY27_VENV_TOOLS_REQUIREMENTS" 2>&1 | grep -v DEPRECATION >&2 || true
        [ -d "$PY27_VENV_TOOLS/virtualenv" ] || die "could not install virtualenv for $python2"
        cp "$PY27_VENV_TOOLS_REQUIREMENTS" "$PY27_VENV_TOOLS/.installed"
    fi
    rm -rf "$venv"
    PYTHONPATH="$PY27_VENV_TOOLS" "$python2" -m virtualenv -q "$venv" >&2
    local args=() f
    for f in "$@"; do args+=(-r "$f"); done
    "$venv/bin/pip" install -q "${args[@]}" 2>&1 | grep -v DEPRECATION >&2 || true
    "$venv/bin/python" -c "import $imports" \
        || die "the virtualenv at $venv lacks packages (import $imports failed)"
    echo "$want" >"$stamp"
}
