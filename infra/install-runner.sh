#!/usr/bin/env bash
# Installs (or upgrades) a ForgeCI runner on a systemd Linux box, as root:
#   infra/install-runner.sh --binary bin/forgeci-runner \
#       --server https://ID.execute-api.REGION.amazonaws.com \
#       --registration-token frg_... [--name NAME] [--labels linux,x64] [--concurrency N]
# Creates the forgeci-runner system user (home /var/lib/forgeci-runner),
# installs the binary to /usr/local/bin, writes /etc/forgeci-runner.conf
# (only if absent), registers once (the token file is kept), installs the
# systemd unit and (re)starts it. Run it again with a new --binary to upgrade:
# the running runner gets SIGTERM and finishes its jobs first.
# --no-start stops short of starting (for baking images).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
binary="" server="" reg="" name="$(hostname)" labels="linux" concurrency=1 start=1
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --server) server="$2"; shift 2 ;;
    --registration-token) reg="$2"; shift 2 ;;
    --name) name="$2"; shift 2 ;;
    --labels) labels="$2"; shift 2 ;;
    --concurrency) concurrency="$2"; shift 2 ;;
    --no-start) start=0; shift ;;
    *) echo "install-runner: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "install-runner: run as root" >&2; exit 1; }
[ -n "$binary" ] && [ -x "$binary" ] || { echo "install-runner: --binary must be an executable forgeci-runner" >&2; exit 2; }

user=forgeci-runner home=/var/lib/forgeci-runner conf=/etc/forgeci-runner.conf
if ! id "$user" >/dev/null 2>&1; then
  useradd --system --home-dir "$home" --create-home --shell /usr/sbin/nologin --user-group "$user"
fi
install -d -o "$user" -g "$user" -m 0750 "$home" "$home/work"

# Replace the binary atomically: a running runner keeps its old inode.
install -m 0755 "$binary" /usr/local/bin/forgeci-runner.new
mv -f /usr/local/bin/forgeci-runner.new /usr/local/bin/forgeci-runner

if [ ! -f "$conf" ]; then
  [ -n "$server" ] || { echo "install-runner: --server is required for a first install" >&2; exit 2; }
  sed -e "s|^server = .*|server = $server|" -e "s|^labels = .*|labels = $labels|" \
      -e "s|^concurrency = .*|concurrency = $concurrency|" "$here/forgeci-runner.conf" > "$conf.new"
  chown root:"$user" "$conf.new"; chmod 0640 "$conf.new"; mv "$conf.new" "$conf"
fi
server="$(sed -n 's/^server *= *//p' "$conf")"

if [ ! -s "$home/token" ]; then
  [ -n "$reg" ] || { echo "install-runner: --registration-token is required to register this runner" >&2; exit 2; }
  runuser -u "$user" -- /usr/local/bin/forgeci-runner register --server "$server" \
      --registration-token "$reg" --name "$name" --labels "$labels" --token-file "$home/token"
fi
chmod 0600 "$home/token"

install -m 0644 "$here/forgeci-runner.service" /etc/systemd/system/forgeci-runner.service
systemctl daemon-reload
systemctl enable forgeci-runner >/dev/null
if [ "$start" -eq 1 ]; then
  systemctl restart forgeci-runner
  echo "forgeci-runner is running: journalctl -u forgeci-runner -f"
fi
