#!/usr/bin/env bash
# Installs what ForgeCI's tests and local stack need and are missing:
# PostgreSQL server binaries, Chromium, bubblewrap, nftables and systemd-analyze from
# Debian and the runner's slot users (when root), versitygw and the
# Lambda Runtime Interface Emulator (go install). Idempotent and quiet
# when everything is present.
set -euo pipefail

have_pg() {
  command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/postgres" ] && return 0
  ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1
}

apt_install() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "deps: missing $*; install them (apt-get install $*) or run as root" >&2
    exit 1
  fi
  if [ -z "${APT_UPDATED:-}" ]; then
    apt-get update -qq
    APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

for tool in zstd git curl; do
  command -v "$tool" >/dev/null 2>&1 || NEED_APT="${NEED_APT:-} $tool"
done
# The end-to-end starter workflows run python3 and node as slot users,
# whose PATH is the system's.
[ -x /usr/bin/python3 ] || NEED_APT="${NEED_APT:-} python3"
[ -x /usr/bin/node ] || NEED_APT="${NEED_APT:-} nodejs"
if [ -n "${NEED_APT:-}" ]; then
  echo "deps: installing$NEED_APT" >&2
  apt_install $NEED_APT
fi

# Headless Chromium for the dashboard's browser tests (chromedp).
if ! command -v chromium >/dev/null 2>&1; then
  echo "deps: installing chromium (browser tests)" >&2
  apt_install chromium
fi

# libfaketime: the chaos suite runs PostgreSQL with its clock five minutes off.
if ! ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1; then
  echo "deps: installing faketime (clock-fault tests)" >&2
  apt_install faketime
fi

# bubblewrap: the runner's --isolation bwrap, which the tests exercise.
if ! command -v bwrap >/dev/null 2>&1; then
  echo "deps: installing bubblewrap (runner sandbox)" >&2
  apt_install bubblewrap
fi

# nft: the tests check the EC2 runner's rules that keep jobs from the
# instance metadata service (nft -c, which changes nothing).
if ! command -v nft >/dev/null 2>&1 && ! [ -x /usr/sbin/nft ]; then
  echo "deps: installing nftables (rules check)" >&2
  apt_install nftables
fi

# systemd-analyze: the tests verify the runner's systemd unit with it (the
# package only provides the tool here; nothing is started).
if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "deps: installing systemd (systemd-analyze verify)" >&2
  apt_install systemd
fi

# Slot users: a runner running as root runs each concurrency slot's steps
# as one of these (the tests and the demo run runners as root, as CI does).
if [ "$(id -u)" -eq 0 ]; then
  for i in $(seq 0 15); do
    id "forgeci-slot$i" >/dev/null 2>&1 ||
      useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin --user-group "forgeci-slot$i"
  done
fi

if ! have_pg; then
  echo "deps: installing PostgreSQL server binaries" >&2
  # We start our own throwaway clusters; stop Debian from creating and
  # starting a system-wide one.
  mkdir -p /etc/postgresql-common/createcluster.d 2>/dev/null || true
  echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/forgeci.conf 2>/dev/null || true
  apt_install postgresql
fi

# versitygw: the S3-compatible server the tests and the local stack use.
VERSITYGW_VERSION=v1.8.0
gobin="$(go env GOPATH)/bin"
if ! command -v versitygw >/dev/null 2>&1 && [ ! -x "$gobin/versitygw" ]; then
  echo "deps: installing versitygw $VERSITYGW_VERSION (go install, about a minute)" >&2
  GOFLAGS=-buildvcs=false go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
fi

# aws-lambda-rie: the Lambda Runtime Interface Emulator the smoke tests run
# every function's bootstrap under. Only this pseudo-version is served by
# the module proxy (the tagged releases are not Go-installable).
RIE_VERSION=v0.0.0-20261030222936-bef5c4ba774d
if ! command -v aws-lambda-rie >/dev/null 2>&1 && [ ! -x "$gobin/aws-lambda-rie" ]; then
  echo "deps: installing aws-lambda-rie (go install)" >&2
  GOFLAGS=-buildvcs=false go install "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@$RIE_VERSION"
fi

# staticcheck: make lint runs it beside go vet.
STATICCHECK_VERSION=v0.8.2
if ! command -v staticcheck >/dev/null 2>&1 && [ ! -x "$gobin/staticcheck" ]; then
  echo "deps: installing staticcheck $STATICCHECK_VERSION (go install)" >&2
  GOFLAGS=-buildvcs=false go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
