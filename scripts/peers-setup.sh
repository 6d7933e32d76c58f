#!/usr/bin/env bash
# Installs the peer clients (issue 2) into venvs of their own, outside the project venv:
#   .venv-livekit  livekit-agents + livekit-plugins-google (google-genai 3.x) + livekit-plugins-openai (its
#                  OpenAI Realtime model, for the OpenAI twin), the plugins at livekit-agents' release
#   .venv-pipecat  pipecat-ai[google,openai] (pins google-genai<3, which the project cannot share; the openai
#                  extra for its OpenAI Realtime service, against the OpenAI twin)
#   .venv-adk      google-adk==2.13.0, pinned exactly: it needs google-genai<3 and websockets<16, and
#                  an unpinned install next to google-genai>=3.3 quietly resolves to google-adk 1.1.1
# The peer scripts under tests/peers/ use only the stdlib and these packages, so neither venv needs
# the project itself. Idempotent: a venv whose stamp matches its pins is skipped at once.
#
# Usage: scripts/peers-setup.sh [livekit|pipecat|adk|all|NAME@RELEASE[+BUILD]]...   (default all; several
#        names are built side by side)
#   NAME@RELEASE (livekit@1.8.9, pipecat@1.14.0, adk@2.13.0) builds .venv-NAME-RELEASE with that release of
#   the framework's packages (for livekit: livekit-agents and both plugins at the same release);
#   +BUILD also applies our patch tests/fixtures/NAME-BUILD.patch to the installed package (livekit@1.8.0+pr003:
#   tests/fixtures/livekit-pr003.patch, livekit/agents PR #6481 as its description says, seed 003) and
#   names the venv .venv-NAME-RELEASE-BUILD (lab/clients/frameworks reads the same names).
# Exit: 0 ready; 75 the package index cannot be reached (no network: callers may skip); 2 a release the
# index does not have, or a NAME@RELEASE[+BUILD] that cannot be; 1 any other failure. A failure prints one line "peers-setup: <peer>: ..." on stderr; pip's log stays in the venv.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
LIVEKIT_PKGS=("livekit-agents==1.8.9" "livekit-plugins-google==1.8.9" "livekit-plugins-openai==1.8.9")
LIVEKIT_CHECK='import livekit.agents, livekit.rtc, livekit.plugins.google, google.genai, livekit.plugins.openai'
PIPECAT_PKGS=("pipecat-ai[google,openai]==1.14.0")
PIPECAT_CHECK='import pipecat, pipecat.services.google.gemini_live.llm, pipecat.tests.utils, google.genai, pipecat.services.openai.realtime.llm'
ADK_PKGS=("google-adk==2.13.0")
ADK_CHECK='import google.adk, google.adk.agents, google.adk.runners, google.genai; assert google.adk.__version__ == "2.13.0", google.adk.__version__'

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# pip's log says why it failed; a network failure is told apart so a test can skip rather than fail.
network_error() {
  grep -qE 'NewConnectionError|Failed to establish a new connection|Network is unreachable|Temporary failure in name resolution|Name or service not known|ConnectTimeout|Max retries exceeded|ProxyError|Connection refused' "$1"
}

# setup_peer NAME DIR CHECK PATCH PKG...   (PATCH: "" or a patch applied, -p1, to the venv's site-packages)
# One build of a venv at a time: parallel test workers may ask for the same venv at once, and the
# second then waits for the first and finds it stamped, instead of two pips writing one venv.
setup_peer() {
  local dir=$2
  mkdir -p "$(dirname "$dir")"
  ( flock 9 && setup_peer_locked "$@" ) 9>"$dir.lock"
}

setup_peer_locked() {
  local name=$1 dir=$2 check=$3 patchfile=$4; shift 4
  local stamp="$dir/.peer-installed" want t0 log site
  want="$(printf '%s\n' "$PY" "$@")"
  if [ -n "$patchfile" ]; then
    [ -f "$patchfile" ] || { echo "peers-setup: $name: the build's patch $patchfile is missing" >&2; return 1; }
    want="$want"$'\n'"patch $(sha256sum "$patchfile" | cut -c1-16)"
  fi
  t0=$(now)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$dir/bin/python" ]; then
    echo "peers-setup: $name ready in $dir (warm, $(since "$t0") s)"
    return 0
  fi
  rm -f "$stamp"
  if [ ! -x "$dir/bin/python" ]; then
    "$PY" -m venv "$dir" || { echo "peers-setup: $name: '$PY -m venv $dir' failed" >&2; return 1; }
  fi
  log="$dir/pip.log"
  if ! scripts/venv-install.sh "$dir" --upgrade "$@" >"$log" 2>&1; then
    if ! network_error "$log" && grep -q 'from versions: none' "$log"; then
      # with retries off pip names no connection error; ask once more, with one retry, to tell
      # "unreachable" from "no such release"
      "$dir/bin/pip" download --retries 1 --timeout 15 --no-deps --no-cache-dir -d "$dir/.probe" "$1" \
        >>"$log" 2>&1 || true
      rm -rf "$dir/.probe"
    fi
    if network_error "$log"; then
      echo "peers-setup: $name: no network to the package index ($(grep -m1 -oE "Failed to establish a new connection: [^')]*|Network is unreachable|Temporary failure in name resolution|Name or service not known|Max retries exceeded[^(]*" "$log" || true)); see $log" >&2
      return 75
    fi
    echo "peers-setup: $name: pip install $* failed: $(grep -E '^ERROR' "$log" | tail -n1 || tail -n1 "$log"); see $log" >&2
    # no such release on the index: bad input (exit 2), told apart from a broken install
    if grep -q 'No matching distribution found' "$log"; then return 2; fi
    return 1
  fi
  if [ -n "$patchfile" ]; then
    site=$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    # the release as published under the patch (an older patch may be applied already)
    if ! scripts/venv-install.sh "$dir" --force-reinstall --no-deps "$@" >>"$log" 2>&1; then
      echo "peers-setup: $name: reinstalling $* before the patch failed; see $log" >&2
      return 1
    fi
    if ! patch -p1 --forward --batch -d "$site" <"$patchfile" >>"$log" 2>&1; then
      echo "peers-setup: $name: $patchfile does not apply to the installed release: $(tail -n1 "$log"); see $log" >&2
      return 1
    fi
  fi
  if ! "$dir/bin/python" -c "$check" >>"$log" 2>&1; then
    echo "peers-setup: $name: installed but does not import: $(tail -n1 "$log"); see $log" >&2
    return 1
  fi
  printf '%s\n' "$want" >"$stamp"
  echo "peers-setup: $name installed in $dir (first, $(since "$t0") s): $("$dir/bin/pip" freeze 2>/dev/null | grep -iE '^(livekit-agents|livekit-plugins-google|livekit-plugins-openai|livekit|pipecat-ai|google-adk|google-genai)==' | tr '\n' ' ')"
}

# wait_all PID...: wait for builds side by side and exit as one would: the first failure decides
# the exit, but a network failure (75) wins so callers can skip
wait_all() {
  local rc=0 r pid
  for pid in "$@"; do
    r=0; wait "$pid" || r=$?
    if [ "$rc" = 0 ] || [ "$r" = 75 ]; then rc=$r; fi
  done
  exit "$rc"
}

# several names: each built side by side (their venvs and locks are their own), the exit as for one
if [ "${1:-}" != --pins ] && [ $# -gt 1 ]; then
  pids=()
  for name in "$@"; do "$0" "$name" & pids+=($!); done
  wait_all "${pids[@]}"
fi
which=${1:-all}
# --pins NAME: the pip requirements of NAME's pinned venv, one a line, and nothing installed (the
# framework client image's offline wheelhouse is downloaded for these: lab/topology/framework_image.py)
if [ "$which" = --pins ]; then
  case "${2:-}" in
    livekit) printf '%s\n' "${LIVEKIT_PKGS[@]}" ;;
    pipecat) printf '%s\n' "${PIPECAT_PKGS[@]}" ;;
    adk) printf '%s\n' "${ADK_PKGS[@]}" ;;
    *) echo "usage: scripts/peers-setup.sh --pins livekit|pipecat|adk" >&2; exit 2 ;;
  esac
  exit 0
fi
case "$which" in
  livekit|pipecat|adk|all) ;;
  *@*)
    # one framework at one release, perhaps patched: NAME@RELEASE[+BUILD]
    name=${which%%@*}; rest=${which#*@}; release=${rest%%+*}; build=""
    [ "$rest" != "$release" ] && build=${rest#*+}
    if ! [[ "$release" =~ ^[0-9][0-9A-Za-z.]*$ ]] || ! [[ "$build" =~ ^[a-z0-9]*$ ]]; then
      echo "peers-setup: $which: write NAME@RELEASE[+BUILD], e.g. livekit@1.8.9 or livekit@1.8.0+pr003" >&2; exit 2
    fi
    case "$name" in
      livekit|pipecat|adk) ;;
      *) echo "peers-setup: $which: no framework $name (livekit, pipecat, adk)" >&2; exit 2 ;;
    esac
    patchfile=${build:+tests/fixtures/$name-$build.patch}
    if [ -n "$patchfile" ] && [ ! -f "$patchfile" ]; then
      echo "peers-setup: $which: no build $build of $name (no $patchfile)" >&2; exit 2
    fi
    dir=".venv-$name-$release${build:+-$build}"
    case "$name" in
      livekit) setup_peer "$which" "$dir" "$LIVEKIT_CHECK" "$patchfile" "livekit-agents==$release" "livekit-plugins-google==$release" \
                 "livekit-plugins-openai==$release" ;;
      pipecat) setup_peer "$which" "$dir" "$PIPECAT_CHECK" "" "pipecat-ai[google,openai]==$release" ;;
      adk) setup_peer "$which" "$dir" "${ADK_CHECK%%; assert*}" "" "google-adk==$release" ;;
    esac
    exit $? ;;
  *) echo "usage: scripts/peers-setup.sh [livekit|pipecat|adk|all|NAME@RELEASE[+BUILD]]" >&2; exit 2 ;;
esac
# The named venvs build side by side: each install spends most of its time downloading and unpacking,
# and the three share nothing but the installer's cache, which is safe to share.
names=(livekit pipecat adk)
[ "$which" = all ] || names=("$which")
pids=()
for name in "${names[@]}"; do
  case "$name" in
    livekit) setup_peer livekit .venv-livekit "$LIVEKIT_CHECK" "" "${LIVEKIT_PKGS[@]}" & ;;
    pipecat) setup_peer pipecat .venv-pipecat "$PIPECAT_CHECK" "" "${PIPECAT_PKGS[@]}" & ;;
    adk) setup_peer adk .venv-adk "$ADK_CHECK" "" "${ADK_PKGS[@]}" & ;;
  esac
  pids+=($!)
done
wait_all "${pids[@]}"
