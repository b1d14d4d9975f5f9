#!/usr/bin/env bash
# Installs (or upgrades) a ForgeCI runner on a systemd Linux box, as root:
#   infra/install-runner.sh --binary bin/forgeci-runner \
#       --server https://ID.execute-api.REGION.amazonaws.com \
#       --registration-token frg_... [--name NAME] [--labels linux,x64] \
#       [--concurrency N] [--isolation user|bwrap|none]
# The runner runs as root and isolates jobs (infra/README.md): it makes one
# unprivileged slot user per concurrency slot (forgeci-slot0, ...), keeps
# its state in /var/lib/forgeci-runner (the token readable by root only),
# installs the binary to /usr/local/bin, writes /etc/forgeci-runner.conf
# (only if absent), registers once (the token file is kept), installs the
# systemd unit and (re)starts it. Run it again with a new --binary to
# upgrade: the running runner gets SIGTERM and finishes its jobs first.
# --no-start stops short of starting (for baking images). --root DIR
# installs into DIR instead of / (users into DIR/etc/passwd; nothing is
# started): for images and for the tests.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
binary="" server="" reg="" name="$(hostname)" labels="linux" concurrency=1 isolation=user start=1 root=""
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --server) server="$2"; shift 2 ;;
    --registration-token) reg="$2"; shift 2 ;;
    --name) name="$2"; shift 2 ;;
    --labels) labels="$2"; shift 2 ;;
    --concurrency) concurrency="$2"; shift 2 ;;
    --isolation) isolation="$2"; shift 2 ;;
    --no-start) start=0; shift ;;
    --root) root="$(cd "$2" && pwd)"; start=0; shift 2 ;;
    *) echo "install-runner: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "install-runner: run as root" >&2; exit 1; }
[ -n "$binary" ] && [ -x "$binary" ] || { echo "install-runner: --binary must be an executable forgeci-runner" >&2; exit 2; }
case "$concurrency" in ''|*[!0-9]*|0) echo "install-runner: --concurrency must be a number from 1" >&2; exit 2 ;; esac
case "$isolation" in user|bwrap|none) ;; *) echo "install-runner: --isolation must be user, bwrap or none" >&2; exit 2 ;; esac
if [ "$isolation" = bwrap ] && ! command -v bwrap >/dev/null 2>&1; then
  echo "install-runner: --isolation bwrap needs bubblewrap (apt-get install bubblewrap)" >&2; exit 2
fi

home=$root/var/lib/forgeci-runner conf=$root/etc/forgeci-runner.conf bindir=$root/usr/local/bin
useradd_in() { if [ -n "$root" ]; then useradd --prefix "$root" "$@"; else useradd "$@"; fi; }
has_user() { if [ -n "$root" ]; then grep -q "^$1:" "$root/etc/passwd" 2>/dev/null; else id "$1" >/dev/null 2>&1; fi; }

# The runner's directory is root's; slot users may pass through it to their
# workspaces (0711), not list it. (Earlier installs ran the runner as a
# forgeci-runner user: its files become root's.)
install -d -o root -g root -m 0711 "$home" "$home/work"
chown root:root "$home/token" 2>/dev/null || true

install -d "$bindir"
# Replace the binary atomically: a running runner keeps its old inode.
install -m 0755 "$binary" "$bindir/forgeci-runner.new"
mv -f "$bindir/forgeci-runner.new" "$bindir/forgeci-runner"

if [ ! -f "$conf" ]; then
  [ -n "$server" ] || { echo "install-runner: --server is required for a first install" >&2; exit 2; }
  install -d "$(dirname "$conf")"
  sed -e "s|^server = .*|server = $server|" -e "s|^labels = .*|labels = $labels|" \
      -e "s|^concurrency = .*|concurrency = $concurrency|" -e "s|^isolation = .*|isolation = $isolation|" \
      "$here/forgeci-runner.conf" > "$conf.new"
  chown root:root "$conf.new"; chmod 0600 "$conf.new"; mv "$conf.new" "$conf"
fi
server="$(sed -n 's/^server *= *//p' "$conf")"
concurrency="$(sed -n 's/^concurrency *= *//p' "$conf")"

# One user per slot (of the config's concurrency): steps of different slots
# cannot see or signal each other, and none can read the runner's token.
for i in $(seq 0 $((${concurrency:-1} - 1))); do
  has_user "forgeci-slot$i" || useradd_in --system --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin --user-group "forgeci-slot$i"
done

if [ ! -s "$home/token" ]; then
  [ -n "$reg" ] || { echo "install-runner: --registration-token is required to register this runner" >&2; exit 2; }
  "$bindir/forgeci-runner" register --server "$server" \
      --registration-token "$reg" --name "$name" --labels "$labels" --token-file "$home/token"
fi
chmod 0600 "$home/token"

install -d "$root/etc/systemd/system"
install -m 0644 "$here/forgeci-runner.service" "$root/etc/systemd/system/forgeci-runner.service"
if [ -n "$root" ]; then
  echo "forgeci-runner installed into $root"
  exit 0
fi
systemctl daemon-reload
systemctl enable forgeci-runner >/dev/null
if [ "$start" -eq 1 ]; then
  systemctl restart forgeci-runner
  echo "forgeci-runner is running: journalctl -u forgeci-runner -f"
fi
