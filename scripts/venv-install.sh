#!/usr/bin/env bash
# venv-install.sh VENV ARGS...: `pip install ARGS...` into the venv VENV, done by uv when it is here.
#
# uv resolves, downloads and unpacks side by side (a framework's venv: ~25-35 s against pip's ~85 s
# on this machine, docs/development.md), which is most of the set-up's time on a fresh machine. It is
# the project venv's own (scripts/setup.sh puts it there), or $LAB_UV; LAB_UV=pip, or no uv, uses
# pip. When uv fails for any reason the same install is run again by pip, whose own words then
# say why (callers classify pip's log: no network, no such release), so uv never changes what a
# failure looks like, only how long a success takes.
#
# ARGS are pip's: -q, -e, --upgrade, --no-deps and --force-reinstall are spoken by both (the last
# is uv's --reinstall). uv byte-compiles what it installs, as pip does: a framework's first import
# inside a scenario's clock then costs what it did under pip.
set -euo pipefail
venv=$1; shift
repo=$(cd "$(dirname "$0")/.." && pwd)
uv=${LAB_UV:-$repo/.venv/bin/uv}
if [ "$uv" != pip ] && ! [ -x "$uv" ]; then uv=$(command -v uv || echo pip); fi

if [ "$uv" != pip ]; then
  args=()
  for a in "$@"; do
    case "$a" in
      --force-reinstall) args+=(--reinstall) ;;
      --disable-pip-version-check) ;;
      *) args+=("$a") ;;
    esac
  done
  # --native-tls: the system's certificates, as pip uses them (a proxy's CA included)
  if "$uv" pip install --python "$venv/bin/python" --native-tls --compile-bytecode "${args[@]}"; then
    exit 0
  fi
  echo "venv-install: uv could not install ${args[*]} into $venv; pip tries the same" >&2
fi
exec "$venv/bin/python" -m pip install --disable-pip-version-check "$@"
