#!/usr/bin/env bash
# The demo: the whole system on this machine, no Docker.
#
#   demo/run.sh            set up everything, run the scenario, print the figures, clean up
#   demo/run.sh --keep     leave the services, operator and node agent running afterwards
#
# 1. starts Kafka, S3 (SeaweedFS) and a Kubernetes control plane on loopback (tests/services);
# 2. runs the operator and streamkeeper-local-node, a node agent that runs the pods scheduled to
#    it as local processes (each pod on its own 127.0.0.x address, a directory per volume claim);
# 3. applies demo/job.yaml: a running count per card, 2 worker pods sharing 4 tasks, exactly once,
#    checkpoints to S3 every 10 s;
# 4. produces events, then kill -9's a worker (its local state survives: delta restore), then
#    kill -9's the other and wipes its volume (a lost disk: restore from the S3 checkpoint);
# 5. checks the output exactly: for every card, the counts read with read_committed are 1, 2, ...,
#    n with n its number of events — no loss, no duplicate — and prints the recovery figures
#    (also written to demo-results/demo.json).
source "$(dirname "$0")/../tests/services/lib.sh"
cd "$(dirname "$0")/.."
keep=false
[[ ${1:-} == --keep ]] && keep=true
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
SECOND_BATCH=${SK_DEMO_MORE_RECORDS:-30000}
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
cargo build --workspace --locked --bins
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
kubectl delete pv -l streamkeeper.dev/local-node=true --ignore-not-found >/dev/null
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
restore_figures() {
  local script
  script=$(cat <<'PY'
import json, sys
tasks = json.load(sys.stdin)["tasks"]
for t in tasks:
    r = t.get("restore") or {}
    print("task %s: restored from %s: %s changelog records replayed, phase %s"
          % (t["task"], r.get("source"), r.get("recordsDone", 0), t["phase"]))
print(json.dumps({"sources": sorted({(t.get("restore") or {}).get("source") for t in tasks} - {None}),
                  "replayed": sum((t.get("restore") or {}).get("recordsDone", 0) for t in tasks)}))
PY
)
  tasks_of "$1" | python3 -c "$script"
}

# kill_and_recover POD [wipe]: kill -9 of POD's worker (wiping its volume too with "wipe"),
# then waits for the restarted worker. Sets RUNNING_S (kill → every task Running), READY_S
# (kill → pod Ready) and FIGURES (the restore report; its last line is JSON).
kill_and_recover() {
  local pod=$1 wipe=${2:-} victim t0 t_running t_ready claim_dir
  victim=$(pid_of "$pod")
  [[ $wipe == wipe ]] && claim_dir=$(ls -d "$DEMO/node/volumes/$NS/"*"-$pod")
  t0=$(date +%s.%N)
  kill -KILL "$victim"
  [[ $wipe == wipe ]] && find "$claim_dir" -mindepth 1 -delete
  until [[ $(pid_of "$pod") != "$victim" && -n $(pid_of "$pod") ]]; do sleep 0.05; done
  wait_tasks_running "$pod"
  t_running=$(date +%s.%N)
  wait_ready "$pod" 300
  t_ready=$(date +%s.%N)
  RUNNING_S=$(python3 -c "print(round($t_running - $t0, 2))")
  READY_S=$(python3 -c "print(round($t_ready - $t0, 2))")
  FIGURES=$(restore_figures "$pod")
  echo "$FIGURES" | head -n -1
  log "$pod: tasks Running ${RUNNING_S}s and pod Ready ${READY_S}s after kill -9${wipe:+ and a wiped volume}"
}

step "kill -9 of $JOB-0's worker while $SECOND_BATCH more events arrive (its disk survives)"
produce "$FIRST_BATCH" "$SECOND_BATCH" &
producer=$!
sleep 2
kill_and_recover "$JOB-0"
running_local=$RUNNING_S kill_local=$READY_S figures_local=$FIGURES
wait "$producer"
wait_caught_up 600

step "kill -9 of $JOB-1's worker and its volume wiped (a lost disk: restore from S3)"
kill_and_recover "$JOB-1" wipe
running_wiped=$RUNNING_S kill_wiped=$READY_S figures_wiped=$FIGURES
produce $((FIRST_BATCH + SECOND_BATCH)) 10000
wait_caught_up 600
total=$((FIRST_BATCH + SECOND_BATCH + 10000))

step "checking the output exactly (read_committed)"
kafka_tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$SK_KAFKA_BOOTSTRAP" \
  --topic "$OUTPUT" --from-beginning --isolation-level read_committed --timeout-ms 15000 \
  --property print.key=true --property 'key.separator=	' > "$DEMO/output.tsv" 2>/dev/null || true
verdict=$(python3 - "$DEMO/output.tsv" "$total" "$CARDS" <<'PY'
import collections, json, sys
path, total, cards = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
expected = collections.Counter(f"card-{(i * 7919) % cards}" for i in range(total))
seen = collections.defaultdict(list)
for line in open(path):
    key, value = line.rstrip("\n").split("\t", 1)
    seen[key].append(json.loads(value)["count"])
bad = [k for k in expected if seen.get(k) != list(range(1, expected[k] + 1))]
extra = set(seen) - set(expected)
records = sum(len(v) for v in seen.values())
print(json.dumps({"cards": len(expected), "events": total, "output_records": records,
                  "exact": not bad and not extra, "wrong_cards": sorted(bad)[:5]}))
PY
)
echo "$verdict"
python3 -c 'import json,sys; sys.exit(0 if json.loads(sys.argv[1])["exact"] else 1)' "$verdict" \
  || die "the output is NOT exact: $verdict"

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
print("task  owner          phase    restored from  records replayed  newest checkpoint")
for t in status["tasks"]:
    r, c = t.get("restore") or {}, t.get("lastCheckpoint") or {}
    print("%4d  %-13s  %-7s  %-13s  %16s  %s" % (t["task"], t.get("owner", "-"), t.get("phase", "-"),
          r.get("source", "-"), r.get("recordsDone", "-"), c.get("sequence", "-")))
'

step "figures"
python3 - "$RESULTS/demo.json" "$kill_local" "$kill_wiped" "$figures_local" "$figures_wiped" "$verdict" "$running_local" "$running_wiped" <<'PY'
import json, sys
out, local_s, wiped_s = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
local, wiped, verdict = (json.loads(a.splitlines()[-1]) for a in sys.argv[4:7])
local_run, wiped_run = float(sys.argv[7]), float(sys.argv[8])
report = {
    "kill9_with_local_state": {"seconds_to_tasks_running": local_run, "seconds_to_ready": local_s, **local},
    "kill9_with_wiped_volume": {"seconds_to_tasks_running": wiped_run, "seconds_to_ready": wiped_s, **wiped},
    "output": verdict,
}
json.dump(report, open(out, "w"), indent=2)
print(f"kill -9, local state kept:   tasks Running again {local_run:.2f} s after the kill (pod Ready {local_s:.2f} s), restore from {local['sources']}, {local['replayed']} changelog records replayed")
print(f"kill -9, volume wiped:       tasks Running again {wiped_run:.2f} s after the kill (pod Ready {wiped_s:.2f} s), restore from {wiped['sources']}, {wiped['replayed']} changelog records replayed")
print(f"output: {verdict['output_records']} records for {verdict['events']} events over {verdict['cards']} cards, exact: {verdict['exact']}")
print(f"written to {out}")
PY
