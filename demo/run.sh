#!/usr/bin/env bash
# The demo: the whole system on this machine, no Docker.
#
#   demo/run.sh              set up everything, run the scenario, print the figures, clean up
#   demo/run.sh --keep       leave the services, operator and node agent running afterwards
#   demo/run.sh --dashboard  also run Prometheus (tests/services/prometheus.sh) scraping the
#                            operator and the worker pods, and render the Grafana dashboard's
#                            panels with the run's data into demo-results/dashboard.png; fails
#                            when a panel has no data
#
# 1. starts Kafka, S3 (SeaweedFS) and a Kubernetes control plane on loopback (tests/services);
# 2. runs the operator and streamkeeper-local-node, a node agent that runs the pods scheduled to
#    it as local processes (each pod on its own 127.0.0.x address, a directory per volume claim);
# 3. applies demo/job.yaml: a running count per card, 2 worker pods sharing 4 tasks, each task
#    with a warm standby on the other pod, exactly once, checkpoints to S3 every 10 s;
# 4. produces events, and with input flowing kill -9's the worker owning tasks: its standbys are
#    promoted, and it comes back as a standby replaying only the delta from its local state;
#    then, still mid-stream, kill -9's the other and wipes its volume (a lost disk): promotion
#    again, and the returning pod's copies warm up from the S3 checkpoint plus the changelog
#    written since, with the restore's progress printed as it happens;
# 5. checks the output exactly: for every card, the counts read with read_committed are 1, 2, ...,
#    n with n its number of events — no loss, no duplicate — and prints the figures (also
#    written to demo-results/demo.json).
source "$(dirname "$0")/../tests/services/lib.sh"
cd "$(dirname "$0")/.."
keep=false
dashboard=false
for argument in "$@"; do
  case $argument in
    --keep) keep=true ;;
    --dashboard) dashboard=true ;;
    *) die "unknown argument '$argument' (known: --keep, --dashboard)" ;;
  esac
done
services=tests/services
"$services/../install-prerequisites.sh"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$SK_CACHE/cargo-target}"
DEMO="$SK_RUN/demo"
RESULTS=demo-results
NS=demo
JOB=card-count
INPUT=demo.card-events
OUTPUT=demo.card-counts
FIRST_BATCH=${SK_DEMO_RECORDS:-60000}
CARDS=500

step() { printf '\n\033[1m== %s\033[0m (%s)\n' "$*" "$(date +%T)"; }

started=()
pids=()
cleanup() {
  local status=$?
  if ! $keep; then
    # The job goes first, while the operator still runs to remove its finalizer.
    kubectl -n "$NS" delete ssj --all --timeout=60s >/dev/null 2>&1 || true
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    for service in "${started[@]}"; do "$services/$service.sh" stop || true; done
  else
    log "--keep: services, operator (pid ${pids[0]:-}) and node agent (pid ${pids[1]:-}) left running; logs in $DEMO"
  fi
  (( status == 0 )) || log "demo FAILED (status $status); logs in $DEMO"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step "building (warm: seconds; cold: see README)"
# The test command's build (`--all-targets`): other target selections resolve other feature sets
# and rebuild shared crates (measured: 30 crates, 2.5 min, after tests/run.sh had built).
cargo build --workspace --all-targets --locked
BIN="$CARGO_TARGET_DIR/debug"

step "starting Kafka, S3 and the Kubernetes control plane"
declare -A ports=([kafka]=19092 [s3]=18333 [kube]=16443)
for service in kafka s3 kube; do
  port_answers "${ports[$service]}" || started+=("$service")
  "$services/$service.sh" start >/dev/null || die "$service did not start"
  while IFS= read -r line; do export "${line?}"; done < <("$services/$service.sh" env)
done
kubectl() { "$SK_KUBE_BIN/kubectl" "$@"; }
kafka_tool() { "$services/kafka.sh" tool "$@"; }

# What an earlier run left behind: its operator and node agent (which stops its pods'
# processes), its namespace, topics, committed offsets; checkpoints go under a fresh prefix.
pkill -TERM -f "streamkeeper-operator run --namespace $NS " 2>/dev/null || true
pkill -TERM -f "streamkeeper-local-node --node-name streamkeeper-demo-node " 2>/dev/null || true
sleep 2
rm -rf "$DEMO" && mkdir -p "$DEMO" "$RESULTS"
PREFIX="demo-$(date +%s)"
# A previous run's job may still carry the operator's finalizer with no operator to remove it.
for job in $(kubectl -n "$NS" get ssj -o name 2>/dev/null); do
  kubectl -n "$NS" patch "$job" --type merge -p '{"metadata":{"finalizers":null}}' >/dev/null || true
done
# Its pods have no node agent left to confirm their end: force them out until it is gone.
if kubectl get namespace "$NS" >/dev/null 2>&1; then
  kubectl delete namespace "$NS" --wait=false >/dev/null
  start=$SECONDS
  while kubectl get namespace "$NS" >/dev/null 2>&1; do
    (( SECONDS - start < 120 )) || die "namespace $NS of an earlier run did not go away"
    kubectl -n "$NS" delete pods --all --force --grace-period=0 >/dev/null 2>&1 || true
    sleep 1
  done
fi
# Only the demo's own volumes: other runs' (the tests', say) may still be bound to claims in
# namespaces being deleted, and waiting for those would hang here.
for pv in $(kubectl get pv -l streamkeeper.dev/local-node=true \
    -o jsonpath="{range .items[?(@.spec.claimRef.namespace==\"$NS\")]}{.metadata.name}{' '}{end}"); do
  kubectl patch pv "$pv" --type merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
  kubectl delete pv "$pv" --ignore-not-found --wait=false >/dev/null
done
for topic in "$INPUT" "$OUTPUT" "$NS.$JOB.changelog" "$NS.$JOB.dead-letter"; do
  kafka_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$SK_KAFKA_BOOTSTRAP" \
    --delete --if-exists --topic "$topic" >/dev/null 2>&1 || true
done
kafka_tool org.apache.kafka.tools.consumer.group.ConsumerGroupCommand --bootstrap-server "$SK_KAFKA_BOOTSTRAP" \
  --delete --group "$NS.$JOB" >/dev/null 2>&1 || true
sleep 1
kafka_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$SK_KAFKA_BOOTSTRAP" \
  --create --topic "$INPUT" --partitions 4 --replication-factor 1 >/dev/null
kafka_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$SK_KAFKA_BOOTSTRAP" \
  --create --topic "$OUTPUT" --partitions 4 --replication-factor 1 >/dev/null

step "installing the CRD, starting the operator and the local node agent"
"$BIN/streamkeeper-operator" crd | kubectl apply --server-side --force-conflicts --field-manager streamkeeper-demo -f - >/dev/null
kubectl wait --for condition=Established crd/statefulstreamjobs.streamkeeper.dev --timeout=60s >/dev/null
"$BIN/streamkeeper-operator" run --namespace "$NS" --metrics-addr 127.0.0.1:18080 > "$DEMO/operator.log" 2>&1 &
pids+=($!)
"$BIN/streamkeeper-local-node" --node-name streamkeeper-demo-node --root "$DEMO/node" \
  --image "streamkeeper/worker=$BIN/streamkeeper-worker" --provision-namespace "$NS" \
  > "$DEMO/node.log" 2>&1 &
pids+=($!)

if $dashboard; then
  step "starting Prometheus, scraping the operator and the worker pods every second"
  "$services/prometheus.sh" start >/dev/null || die "prometheus did not start"
  started+=(prometheus)
  while IFS= read -r line; do export "${line?}"; done < <("$services/prometheus.sh" env)
  DASHBOARD_FROM=$(date +%s)
  # The pods' addresses change as they restart: the targets follow every second.
  while true; do
    kubectl -n "$NS" get pods -l "streamkeeper.dev/job=$JOB" -o json 2>/dev/null \
      | tests/services/prometheus-targets.py "$SK_PROMETHEUS_TARGETS" --operator 127.0.0.1:18080 --pods-json - \
      >/dev/null 2>&1 || true
    sleep 1
  done &
  pids+=($!)
fi

step "applying the job: $(grep -c . demo/job.yaml) lines of YAML"
kubectl create namespace "$NS" >/dev/null
kubectl -n "$NS" create secret generic demo-s3 \
  --from-literal=AWS_ACCESS_KEY_ID="$SK_S3_ACCESS_KEY" \
  --from-literal=AWS_SECRET_ACCESS_KEY="$SK_S3_SECRET_KEY" >/dev/null
sed "s|prefix: demo$|prefix: $PREFIX|" demo/job.yaml | kubectl apply -f -

# The events, deterministic: card-<i*7919 mod CARDS>, one JSON object per line, key TAB value.
events() {
  python3 - "$1" "$2" "$CARDS" <<'PY'
import sys
start, count, cards = map(int, sys.argv[1:])
for i in range(start, start + count):
    card = f"card-{(i * 7919) % cards}"
    print(f'{card}\t{{"card":"{card}","amount":{i % 97 + 1}}}')
PY
}
produce() {
  events "$1" "$2" | kafka_tool org.apache.kafka.tools.ConsoleProducer --bootstrap-server "$SK_KAFKA_BOOTSTRAP" \
    --topic "$INPUT" --property parse.key=true --property 'key.separator=	' \
    --producer-property linger.ms=20 --producer-property batch.size=262144 >/dev/null
}

pod_field() { kubectl -n "$NS" get pod "$1" -o jsonpath="$2" 2>/dev/null; }
pod_ready() { [[ $(pod_field "$1" '{.status.conditions[?(@.type=="Ready")].status}') == True ]]; }
wait_ready() {
  local pod=$1 limit=$2 start=$SECONDS
  until pod_ready "$pod"; do
    (( SECONDS - start < limit )) || die "$pod not Ready within ${limit}s; see $DEMO/node/pods/*/logs"
    sleep 0.1
  done
}
committed() {
  kafka_tool org.apache.kafka.tools.consumer.group.ConsumerGroupCommand --bootstrap-server "$SK_KAFKA_BOOTSTRAP" \
    --describe --group "$NS.$JOB" 2>/dev/null | awk -v t="$INPUT" '$2 == t && $4 != "-" { lag += $6; n++ } END { if (n == 4) print lag; else print -1 }'
}
wait_caught_up() {
  local limit=$1 start=$SECONDS
  until [[ $(committed) == 0 ]]; do
    (( SECONDS - start < limit )) || die "the job did not consume its input within ${limit}s"
    sleep 1
  done
}
tasks_of() { curl -sf --max-time 1 "http://$(pod_field "$1" '{.status.podIP}'):8080/v1/tasks"; }
# Waits until the worker of $1 reports every task Running (what recovery means to the job; the
# pod's Ready condition follows at the next readiness probe, up to its 5 s period later).
wait_tasks_running() {
  local pod=$1 address start=$SECONDS
  address=$(pod_field "$pod" '{.status.podIP}')
  until curl -sf --max-time 1 "http://$address:8080/v1/tasks" \
      | python3 -c 'import json,sys; t=json.load(sys.stdin)["tasks"]; sys.exit(0 if t and all(x["phase"]=="Running" for x in t) else 1)' 2>/dev/null; do
    (( SECONDS - start < 300 )) || die "the tasks of $pod did not reach Running within 300s"
    sleep 0.05
  done
}

step "waiting for the worker pods"
for pod in "$JOB-0" "$JOB-1"; do
  start=$SECONDS
  until pod_field "$pod" '{.metadata.name}' >/dev/null; do
    (( SECONDS - start < 120 )) || { kubectl -n "$NS" get ssj,sts,pods,pvc; die "$pod was not created; see $DEMO/operator.log"; }
    sleep 0.5
  done
  wait_ready "$pod" 180
done
kubectl -n "$NS" get ssj,pods -o wide

step "producing $FIRST_BATCH events over $CARDS cards"
produce 0 "$FIRST_BATCH"
wait_caught_up 600
log "every event processed and committed; waiting for a checkpoint of every task"
start=$SECONDS
until [[ $(kubectl -n "$NS" get ssj "$JOB" -o jsonpath='{.status.newestCheckpointTime}') != "" ]]; do
  (( SECONDS - start < 120 )) || die "no checkpoint reported within 120s; see $DEMO/node/pods/*/logs"
  sleep 1
done
sleep 12  # one more checkpoint interval, so every task has one after the input was processed
kubectl -n "$NS" get ssj "$JOB"

pid_of() { pod_field "$1" '{.status.containerStatuses[0].containerID}' | sed 's|local://||'; }
job_json() { kubectl -n "$NS" get ssj "$JOB" -o json; }
wait_standbys_ready() {
  local start=$SECONDS
  until [[ $(kubectl -n "$NS" get ssj "$JOB" -o jsonpath='{.status.conditions[?(@.type=="StandbysReady")].status}') == True ]]; do
    (( SECONDS - start < 300 )) || die "the standbys were not warm within 300s; see $DEMO/operator.log"
    sleep 0.2
  done
}
# The tasks the assignment gives $1 as their active owner.
active_tasks_of() {
  kubectl -n "$NS" get configmap "$JOB-assignment" -o jsonpath='{.data.assignment\.json}' \
    | python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join(str(t["task"]) for t in d["tasks"] if t.get("active")==sys.argv[1]))' "$1"
}

# Prints the copies of $1 as they restore, every half second, until each is Running; the last
# line is JSON: the sources and the changelog records the pod's copies replayed.
follow_restore() {
  local pod=$1 start=$SECONDS address
  until address=$(pod_field "$pod" '{.status.podIP}') && [[ -n $address ]] && curl -sf --max-time 1 "http://$address:8080/v1/tasks" >/dev/null; do
    (( SECONDS - start < 120 )) || die "$pod did not come back within 120s"
    sleep 0.1
  done
  until tasks_of "$pod" | python3 -c '
import json, sys
tasks = json.load(sys.stdin)["tasks"]
parts = []
for t in tasks:
    r = t.get("restore") or {}
    d = r.get("download") or {}
    eta = r.get("etaSeconds")
    what = "%s %s" % (r.get("source", "?"), r.get("phase", "-"))
    if d:
        what += " (checkpoint %d: %d/%d bytes)" % (d["checkpointSequence"], d["bytesDone"], d["bytesTotal"])
    what += " %d/%d records" % (r.get("recordsDone", 0), r.get("recordsTotal", 0))
    if eta is not None and t["phase"] != "Running":
        what += ", eta %.1fs" % eta
    parts.append("task %d %s %s: %s" % (t["task"], t["role"], t["phase"], what))
print("  " + " | ".join(parts), flush=True)
sys.exit(0 if tasks and all(t["phase"] == "Running" for t in tasks) else 1)
'; do
    (( SECONDS - start < 300 )) || die "the copies of $pod did not reach Running within 300s"
    sleep 0.5
  done
  tasks_of "$pod" | python3 -c '
import json, sys
tasks = json.load(sys.stdin)["tasks"]
print(json.dumps({"sources": sorted({(t.get("restore") or {}).get("source") for t in tasks} - {None}),
                  "replayed": sum((t.get("restore") or {}).get("recordsDone", 0) for t in tasks),
                  "roles": sorted(t["role"] for t in tasks)}))'
}

# Waits until the status shows a timed promotion, decided after $2 (unix seconds), of each of
# the tasks $3 (space-separated) away from pod $1; prints them; the last line is JSON.
promotions_since() {
  local pod=$1 since=$2 tasks=$3 start=$SECONDS script
  script=$(cat <<'PY'
import datetime, json, sys
pod, since, wanted = sys.argv[1], float(sys.argv[2]), [int(t) for t in sys.argv[3].split()]
status = json.load(sys.stdin).get("status") or {}
found = {}
for t in status.get("tasks", []):
    p = t.get("lastPromotion") or {}
    when = p.get("time")
    if t["task"] in wanted and p.get("from") == pod and when and p.get("firstCommitSeconds") is not None:
        at = datetime.datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp()
        if at >= since:
            found[t["task"]] = p
if sorted(found) != sorted(wanted):
    sys.exit(1)
for task, p in sorted(found.items()):
    print("  task %d: %s -> %s, copy %s records behind, detected after %.2f s, first commit %.2f s later"
          % (task, p["from"], p["to"], p.get("lagAtPromotion", "?"), p.get("detectionSeconds") or 0, p["firstCommitSeconds"]))
stalls = [(p.get("detectionSeconds") or 0) + p["firstCommitSeconds"] for p in found.values()]
print(json.dumps({"promoted_tasks": sorted(found), "longest_stall_seconds": round(max(stalls), 3)}))
PY
)
  until job_json | python3 -c "$script" "$pod" "$since" "$tasks" 2>/dev/null; do
    (( SECONDS - start < 120 )) || die "no timed promotion of tasks $tasks off $pod in the status within 120s; see $DEMO/operator.log"
    sleep 0.5
  done
}

# kill_mid_stream POD EVENTS_FROM [wipe]: kill -9 of POD's worker (wiping its volume too with
# "wipe") while 20,000 more events arrive; shows the promotion of its tasks, then follows the
# returning pod's copies as they restore. Sets PROMOTION and RESTORE (JSON) and PRODUCED.
kill_mid_stream() {
  local pod=$1 from=$2 wipe=${3:-} victim t0 claim_dir tasks producer
  tasks=$(active_tasks_of "$pod")
  [[ -n $tasks ]] || die "$pod owns no task to kill"
  victim=$(pid_of "$pod")
  [[ $wipe == wipe ]] && claim_dir=$(ls -d "$DEMO/node/volumes/$NS/"*"-$pod")
  produce "$from" 20000 &
  producer=$!
  sleep 1
  t0=$(date +%s.%N)
  kill -KILL "$victim"
  [[ $wipe == wipe ]] && find "$claim_dir" -mindepth 1 -delete
  log "killed $pod's worker (pid $victim, owner of tasks $tasks)${wipe:+ and wiped its volume}; its standbys take over:"
  PROMOTION=$(promotions_since "$pod" "${t0%.*}" "$tasks")
  echo "$PROMOTION" | head -n -1
  log "$pod comes back${wipe:+ with an empty volume}; its copies restore:"
  RESTORE=$(follow_restore "$pod")
  echo "$RESTORE" | head -n -1
  wait "$producer"
  PRODUCED=$((from + 20000))
  wait_caught_up 600
  wait_balanced
}

# Every task has a warm standby and each pod owns half the tasks (after a failure the returning
# pod gets its share back once its copies are warm).
wait_balanced() {
  local start=$SECONDS
  wait_standbys_ready
  until [[ $(active_tasks_of "$JOB-0" | wc -w) == 2 && $(active_tasks_of "$JOB-1" | wc -w) == 2 ]]; do
    (( SECONDS - start < 120 )) || die "the tasks were not shared out again within 120s; see $DEMO/operator.log"
    sleep 0.2
  done
  wait_standbys_ready
}

log "waiting for every task's standby to be warm"
wait_balanced
kubectl -n "$NS" get ssj "$JOB"

step "kill -9 of $JOB-0's worker mid-stream (its disk survives)"
kill_mid_stream "$JOB-0" "$((FIRST_BATCH))"
promotion_local=$PROMOTION restore_local=$RESTORE

step "kill -9 of $JOB-1's worker mid-stream, its volume wiped (a lost disk)"
kill_mid_stream "$JOB-1" "$PRODUCED" wipe
promotion_wiped=$PROMOTION restore_wiped=$RESTORE
total=$PRODUCED

step "checking the output exactly (read_committed)"
kafka_tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$SK_KAFKA_BOOTSTRAP" \
  --topic "$OUTPUT" --from-beginning --isolation-level read_committed --timeout-ms 15000 \
  --property print.key=true --property 'key.separator=	' > "$DEMO/output.tsv" 2>/dev/null || true
verdict=$(python3 scripts/card-count-verdict.py "$DEMO/output.tsv" "$total" "$CARDS") \
  || die "the output is NOT exact: $verdict"
echo "$verdict"

step "the job's status, as the operator reports it from the workers"
start=$SECONDS
until [[ $(kubectl -n "$NS" get ssj "$JOB" -o jsonpath='{.status.readyTasks}') == 4/4 ]]; do
  (( SECONDS - start < 120 )) || die "the status did not reach 4/4 ready tasks within 120s; see $DEMO/operator.log"
  kubectl -n "$NS" annotate ssj "$JOB" --overwrite demo.streamkeeper.dev/refresh="$SECONDS" >/dev/null
  sleep 2
done
kubectl -n "$NS" get ssj "$JOB"
kubectl -n "$NS" get ssj "$JOB" -o json | python3 -c '
import json, sys
status = json.load(sys.stdin)["status"]
print("task  owner          standby (lag)      phase    newest checkpoint  last promotion")
for t in status["tasks"]:
    c, p = t.get("lastCheckpoint") or {}, t.get("lastPromotion") or {}
    standbys = ", ".join("%s (%s)" % (s["pod"], s.get("lag", "?")) for s in t.get("standbys", [])) or "-"
    moved = "%s -> %s" % (p["from"], p["to"]) if p else "-"
    print("%4d  %-13s  %-17s  %-7s  %17s  %s" % (t["task"], t.get("owner", "-"), standbys,
          t.get("phase", "-"), c.get("sequence", "-"), moved))
'

step "figures"
python3 - "$RESULTS/demo.json" "$promotion_local" "$restore_local" "$promotion_wiped" "$restore_wiped" "$verdict" <<'PY'
import json, sys
out = sys.argv[1]
promotion_local, restore_local, promotion_wiped, restore_wiped, verdict = (
    json.loads(a.splitlines()[-1]) for a in sys.argv[2:7])
report = {
    "kill9_with_local_state": {"promotion": promotion_local, "returning_pod_copies": restore_local},
    "kill9_with_wiped_volume": {"promotion": promotion_wiped, "returning_pod_copies": restore_wiped},
    "output": verdict,
}
json.dump(report, open(out, "w"), indent=2)
for name, promotion, restore in (("kill -9, disk kept:   ", promotion_local, restore_local),
                                 ("kill -9, volume wiped:", promotion_wiped, restore_wiped)):
    print(f"{name} tasks {promotion['promoted_tasks']} promoted on their standbys, longest stall "
          f"{promotion['longest_stall_seconds']:.2f} s (detection + first commit); the returning pod's "
          f"copies restored from {restore['sources']}, {restore['replayed']} changelog records replayed")
print(f"output: {verdict['output_records']} records for {verdict['events']} events over {verdict['cards']} cards, exact: {verdict['exact']}")
print(f"written to {out}")
PY

if $dashboard; then
  step "the Grafana dashboard's panels with this run's data"
  sleep 3  # the last scrapes
  scripts/render-dashboard.py --prometheus "$SK_PROMETHEUS_URL" \
    --dashboard charts/streamkeeper/dashboards/streamkeeper.json \
    --start "$DASHBOARD_FROM" --end "$(date +%s)" \
    --out "$RESULTS/dashboard.png" --json "$RESULTS/dashboard.json" \
    || die "a dashboard panel has no data (see above and $RESULTS/dashboard.png)"
fi
