#!/usr/bin/env bash
# Build the wheel and the sdist into python/dist/, then, in fresh virtual
# environments: pip install ./python and run README.md's quick start against
# a real server; install the wheel and check that it ships py.typed. With a
# python3.9 on the machine, the quick start also runs on the oldest
# supported Python.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/venv.sh
work=$(mktemp -d)
rm -rf dist
if ! .venv/bin/python -m build --outdir dist . >"$work/build.log" 2>&1; then
    cat "$work/build.log"
    exit 1
fi
ls dist/*.whl dist/*.tar.gz

server_pid=
cleanup() {
    if [[ -n $server_pid ]]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

bin=${MONOLOCK_BIN:-}
if [[ -z $bin ]]; then
    (cd ../go && go build -o ../bin/monolock ./cmd/monolock)
    bin=$PWD/../bin/monolock
fi
: >"$work/server.log"
"$bin" serve --listen 127.0.0.1:0 --data-dir "$work/data" --ready-file "$work/ready.json" 2>"$work/server.log" &
server_pid=$!
source ../scripts/lib/ready.sh
addr=$(wait_ready "$work/ready.json" "$server_pid" "$work/server.log" 10)

pythons=(python3)
oldest=$(command -v python3.9 || true)
if [[ -n $oldest ]] && ! "$oldest" -c 'pass' 2>/dev/null; then
    oldest=  # a pyenv shim without that version selected
fi
if [[ -z $oldest ]] && command -v pyenv >/dev/null 2>&1; then
    v=$(pyenv versions --bare 2>/dev/null | grep -E '^3\.9(\.|$)' | tail -1 || true)
    [[ -n $v ]] && oldest=$(pyenv root)/versions/$v/bin/python3.9
fi
if [[ -n $oldest ]] && "$oldest" -c 'pass' 2>/dev/null; then
    pythons+=("$oldest")
fi
for py in "${pythons[@]}"; do
    venv="$work/venv-$(basename "$py")"
    "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet .
    (cd "$work" && "$venv/bin/python" "$OLDPWD/scripts/quickstart.py" "$OLDPWD/README.md" "$addr")
    echo "[python] pip install ./python + quick start: ok with $("$venv/bin/python" --version)"
done

"$work/venv-python3/bin/python" -m pip install --quiet --force-reinstall --no-deps dist/*.whl
(cd "$work" && venv-python3/bin/python - <<'PY'
import importlib.resources, monolock, monolock.aio
assert (importlib.resources.files("monolock") / "py.typed").is_file(), "py.typed missing"
print("[python] wheel ok:", monolock.__version__)
PY
)
