#!/usr/bin/env bash
# The README's test command: provision what the tests need (idempotently: only what is missing), then run
# pytest. On a fresh Debian machine with Python 3.11+ as root it installs Prometheus, a JDK and the venv
# module from Debian, Flink 2.3 from PyPI apart from the app's environment, and the project with its
# test tools into a virtual environment. Without root, what apt would install is left out and the tests
# that need it are skipped with the reason. Arguments go to pytest (e.g. scripts/test.sh -m 'not e2e').
#
#   FORESAIL_PYTHON   interpreter to build the venv from (default: python3)
#   FORESAIL_VENV     the venv (default: .venv in the checkout); an activated venv is used as it is
#   FLINK_HOME        an existing Flink (default: installed into /opt/foresail-stack or ~/.cache)
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
started=$SECONDS
say() { echo "test.sh: $*" >&2; }

# ---- Debian packages (root only) -------------------------------------------------------------------
python=${FORESAIL_PYTHON:-python3}
packages=()
command -v prometheus >/dev/null && command -v promtool >/dev/null || packages+=(prometheus)
command -v javac >/dev/null && command -v jar >/dev/null || packages+=(default-jdk-headless)
if [ -z "${VIRTUAL_ENV:-}" ] && ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
    packages+=("python3-venv")
fi
provisioned=1
if [ ${#packages[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "installing ${packages[*]} (apt)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
    else
        say "not root (or no apt): ${packages[*]} missing; the tests that need them are skipped"
        provisioned=0
    fi
fi

# ---- the project and its test tools, in a venv -------------------------------------------------------
if [ -n "${VIRTUAL_ENV:-}" ]; then
    python="$VIRTUAL_ENV/bin/python"
else
    venv=${FORESAIL_VENV:-.venv}
    # --system-site-packages: what the interpreter already has (on a CI image, the heavy wheels) is reused
    [ -x "$venv/bin/python" ] || "$python" -m venv --system-site-packages "$venv"
    python="$venv/bin/python"
fi
"$python" -m pip install --quiet --constraint deploy/constraints.txt -e '.[dev]'

# ---- Flink 2.3 for the end-to-end tests, apart from the app's environment (its pins clash with pyspark's)
if [ -z "${FLINK_HOME:-}" ]; then
    stack=/opt/foresail-stack
    [ -w /opt ] || stack="$HOME/.cache/foresail-stack"
    target="$stack/flink-2.3.0"
    if [ ! -x "$target/pyflink/bin/taskmanager.sh" ]; then
        say "installing Flink 2.3 into $target"
        "$python" -m pip install --quiet --no-deps --target "$target" apache-flink==2.3.0 apache-flink-libraries==2.3.0
    fi
    export FLINK_HOME="$target/pyflink"
fi
say "provisioned in $((SECONDS - started)) s"

# with everything provisioned, a missing program is a failure (tests/conftest.py require_tool), not a skip
[ "$provisioned" = 1 ] && export FORESAIL_REQUIRE_STACK=1
"$python" -m ruff check .
"$python" -m ruff format --check .
exec "$python" -m pytest -q "$@"
