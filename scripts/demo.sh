#!/usr/bin/env bash
# The main job: a local ForgeCI (PostgreSQL, versitygw, every function's
# handler, the sweeper), one runner, and this repository's .forgeci.yml
# submitted and followed to the end. Exits 0 only if every job PASSED. In
# a terminal it then keeps the stack up and says how to look at the run.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/forgeci-demo-XXXXXX)
chmod 755 "$work"
# As root the runner isolates steps (a user per slot, a cgroup per job),
# and each job has a /tmp of its own: workspaces live outside /tmp.
jobs="$work/jobs"
if [ "$(id -u)" -eq 0 ]; then
  jobs=$(mktemp -d /var/lib/forgeci-demo-jobs.XXXXXX)
fi
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work" "$jobs"
}
trap cleanup EXIT

bin/forgeci dev --addr 127.0.0.1:0 --info "$work/info" --sweep-every 2s >"$work/dev.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 600); do [ -s "$work/info" ] && break; sleep 0.1; done
[ -s "$work/info" ] || { echo "demo: the local stack did not start:"; cat "$work/dev.log"; exit 1; }
# shellcheck disable=SC1091
. "$work/info"
echo "demo: ForgeCI is running at $FORGECI_URL"

bin/forgeci-runner register --server "$FORGECI_URL" --registration-token "$FORGECI_REGISTRATION_TOKEN" \
  --name demo-runner --labels linux --token-file "$work/runner.token"
bin/forgeci-runner run --server "$FORGECI_URL" --token-file "$work/runner.token" --work-dir "$jobs" \
  --concurrency 2 >"$work/runner.log" 2>&1 &
pids+=($!)

export FORGECI_URL FORGECI_TOKEN
# Runs are made only in projects that exist.
bin/forgeci project create forgeci/demo
if ! bin/forgeci submit --dir . --project forgeci/demo --follow; then
  echo "demo: the run did not pass; runner log:"; tail -50 "$work/runner.log"; exit 1
fi

# The deploy job's lease, as its runner held it, is stale now that the
# job has ended: a copy of it is refused a token (409), because the
# control plane checks the whole tuple, whoever presents it.
claimed=$(grep 'msg=claimed job=deploy ' "$work/runner.log" | tail -1)
field() { printf '%s\n' "$claimed" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
lease=$(printf '{"run_id":"%s","job_id":"%s","runner_id":"%s","lease_id":"%s","generation":%s}' \
  "$(field run_id)" "$(field job_id)" "$(field runner_id)" "$(field lease_id)" "$(field generation)")
status=$(curl -s -o "$work/stale.json" -w '%{http_code}' -X POST "$FORGECI_URL/v1/runner/jobs/$(field job_id)/id-token" \
  -H "Authorization: Bearer $(cat "$work/runner.token")" -H 'Content-Type: application/json' \
  -d "{\"lease\":$lease,\"audience\":\"forgeci-demo\"}")
if [ "$status" != 409 ]; then
  echo "demo: a stale copy of the deploy job's lease was answered $status: $(cat "$work/stale.json")"; exit 1
fi
echo "demo: a stale copy of the deploy job's lease is refused a token: $status $(cat "$work/stale.json")"

# In a terminal the stack stays up to be looked at; without one (CI) the
# demo ends here.
if [ -t 0 ] && [ -t 1 ]; then
  run_id=$(bin/forgeci runs -p forgeci/demo --json | grep -o '"id": *"[^"]*"' | head -1 | sed 's/.*"\([^"]*\)"$/\1/')
  cat <<EOT

demo: the stack stays up. Open the dashboard and log in with the token:
  dashboard:  $FORGECI_URL/runs/$run_id
  token:      $FORGECI_TOKEN
Download the run's artifacts (checked against their digests):
  FORGECI_URL=$FORGECI_URL FORGECI_TOKEN=$FORGECI_TOKEN bin/forgeci artifacts $run_id -o ./demo-artifacts
Press Ctrl-C to stop.
EOT
  wait "${pids[0]}"
fi
