#!/usr/bin/env bash
# Installs what the lab needs on a fresh Debian/Ubuntu machine (as root), then the project's venv.
# Idempotent: it skips what is already there, so `make` can call it before every target.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for tool in iptables:iptables tcpdump:tcpdump tshark:tshark editcap:tshark mergecap:tshark \
            espeak-ng:espeak-ng ip:iproute2 ss:iproute2 nsenter:util-linux; do
  cmd=${tool%%:*}; pkg=${tool##*:}
  command -v "$cmd" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup: missing system tools (${need_apt[*]}); run as root or install them: apt-get install ${need_apt[*]}" >&2
    exit 3
  fi
  export DEBIAN_FRONTEND=noninteractive
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $(printf '%s\n' "${need_apt[@]}" | sort -u) >/dev/null
fi

# the report pages' browser tests (Selenium drives Debian's headless Chromium): optional, they skip without it
if ! command -v chromedriver >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  { apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null; }; } \
    || echo "setup: chromium not installed; the browser tests will skip" >&2
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  # uv, the fast installer scripts/venv-install.sh uses for this venv and the frameworks' (without
  # it, pip does the same installs more slowly)
  .venv/bin/pip install -q --disable-pip-version-check 'uv>=0.5,<1' > .venv/pip.log 2>&1 \
    || echo "setup: uv did not install (.venv/pip.log); pip installs instead" >&2
  # the installer's own output goes to a log, shown only when the install fails
  if ! scripts/venv-install.sh .venv -q -e '.[test]' >> .venv/pip.log 2>&1 \
     || ! .venv/bin/python -c 'import lab, google.genai, websockets, pyroute2, scapy, yaml' 2>> .venv/pip.log; then
    grep -vE '^WARNING: Location' .venv/pip.log | tail -20 >&2
    echo "setup: the project venv did not install (full log: .venv/pip.log)" >&2
    exit 3
  fi
  touch "$stamp"
fi
