# The end-to-end scenario, one for every cluster provider. Sourced, never run: by tests/e2e/kind.sh
# (kind on a laptop with Docker) and tests/e2e/real-node.sh (the kubelet and containerd of
# tests/services/node.sh, here and in CI), after tests/services/lib.sh. The provider then defines
#
#   kubectl, helm           functions bound to its cluster
#   provider_manifest FILE  prints a manifest of tests/e2e/manifests as its cluster applies it (the
#                           real node swaps in its stand-in images)
#   PROVIDER                its name, for the log
#
# makes the operator and worker images available to its cluster, and calls run_scenario:
# 1. Kafka (KRaft, one broker) and SeaweedFS S3 as pods, from tests/e2e/manifests;
# 2. `helm install` of charts/streamkeeper;
# 3. examples/card-count.yaml (replication factor 1 and a 10 s checkpoint interval: one broker) in
#    a namespace enforcing Pod Security `restricted`;
# 4. input, and mid-stream `kubectl delete pod --force --grace-period=0` of a worker;
# 5. read_committed, every card's counts are 1, 2, ..., n with n its events (what an uninterrupted
#    run outputs: no loss, no duplicate);
# 6. `kubectl get ssj`, the status and the Events show the deleted pod's tasks moved to their
#    standbys.

NS=e2e
JOB=card-count
INPUT=card-transactions
OUTPUT=card-counts
CARDS=200
FIRST_BATCH=20000
SECOND_BATCH=20000
# The second batch is produced at this rate, so the worker is deleted while input flows.
SECOND_BATCH_PER_SECOND=800

sorted_words() { tr ' ' '\n' | grep . | sort -n | paste -sd' '; }
step() { printf '\n\033[1m== %s\033[0m (%s)\n' "$*" "$(date +%T)"; }
kafka() { kubectl -n kafka exec -i kafka-0 -- "$@"; }

# events <first> <count> [per second]: the input, one `key<TAB>value` line each.
events() {
  python3 - "$1" "$2" "$CARDS" "${3:-0}" <<'PY'
import sys, time
start, count, cards, rate = map(int, sys.argv[1:])
began = time.monotonic()
for i in range(start, start + count):
    card = f"card-{(i * 7919) % cards}"
    print(f'{card}\t{{"card":"{card}","amount":{i % 97 + 1}}}', flush=rate > 0)
    if rate and (i - start + 1) % (rate // 10 or 1) == 0:
        time.sleep(max(0.0, began + (i - start + 1) / rate - time.monotonic()))
PY
}
produce() {
  events "$@" | kafka /opt/kafka/bin/kafka-console-producer.sh --bootstrap-server localhost:9092 \
    --topic "$INPUT" --property parse.key=true --property 'key.separator=	' >/dev/null
}
# The job's committed input offsets: "<sum of offsets> <sum of lag>", or nothing before all 4
# partitions have one.
offsets() {
  kafka /opt/kafka/bin/kafka-consumer-groups.sh --bootstrap-server localhost:9092 --describe \
    --group "$NS.$JOB" 2>/dev/null \
    | awk -v t="$INPUT" '$2 == t && $4 != "-" { done += $4; lag += $6; n++ } END { if (n == 4) print done, lag }'
}
caught_up() { local o; o=$(offsets); [[ -n $o && ${o#* } == 0 ]]; }
consumed_at_least() { local o; o=$(offsets); [[ -n $o ]] && (( ${o% *} >= $1 )); }
wait_caught_up() {
  wait_until "$1" "the job consuming its input" caught_up \
    || die "the job did not consume its input within $1 s"
}
# The tasks the stored assignment gives pod $1 as their active owner.
active_tasks_of() {
  kubectl -n "$NS" get configmap "$JOB-assignment" -o jsonpath='{.data.assignment\.json}' \
    | python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join(str(t["task"]) for t in d["tasks"] if t.get("active")==sys.argv[1]))' "$1"
}
# Whether every task of $2 has a Promoted or HandedOff Event naming its move off pod $1.
move_events() {
  kubectl -n "$NS" get events --field-selector "involvedObject.name=$JOB" -o json \
    | python3 -c '
import json, sys
pod, tasks = sys.argv[1], sys.argv[2].split()
notes = [e.get("message") or e.get("note") or "" for e in json.load(sys.stdin)["items"]
         if e.get("reason") in ("Promoted", "HandedOff")]
sys.exit(0 if all(any(n.startswith("task %s:" % t) and pod in n for n in notes) for t in tasks) else 1)
' "$1" "$2"
}
# Prints the tasks of every Promoted Event, one a line: a healthy pod's tasks must never be among
# them, nor a task twice (a worker starved of CPU misses its heartbeat and is failed over).
promoted_tasks() {
  kubectl -n "$NS" get events --field-selector "involvedObject.name=$JOB,reason=Promoted" -o json \
    | python3 -c '
import json, sys
for e in json.load(sys.stdin)["items"]:
    note = e.get("message") or e.get("note") or ""
    print(note.split(":", 1)[0].removeprefix("task "), "|", note)
'
}
# Whether the status is Ready and shows every task of $2 moved off pod $1, its first commit timed.
moves_in_status() {
  kubectl -n "$NS" get ssj "$JOB" -o json | python3 -c '
import json, sys
pod, tasks = sys.argv[1], [int(t) for t in sys.argv[2].split()]
status = json.load(sys.stdin)["status"]
ready = [c for c in status["conditions"] if c["type"] == "Ready"][0]
moves = {t["task"]: [m for m in (t.get("lastPromotion"), t.get("lastHandoff"))
                     if m and m.get("from") == pod and m.get("firstCommitSeconds") is not None]
         for t in status["tasks"]}
sys.exit(0 if ready["status"] == "True" and all(moves.get(t) for t in tasks) else 1)
' "$1" "$2"
}

install_kafka_and_s3() {
  step "Kafka (KRaft, one broker) and SeaweedFS S3"
  local manifest
  for manifest in tests/e2e/manifests/kafka.yaml tests/e2e/manifests/seaweedfs.yaml; do
    provider_manifest "$manifest" | kubectl apply -f -
  done
  kubectl -n kafka rollout status statefulset/kafka --timeout=300s
  kubectl -n storage rollout status deployment/seaweedfs --timeout=300s
  kubectl -n storage wait --for=condition=Complete job/create-bucket --timeout=300s
  local topic
  for topic in "$INPUT" "$OUTPUT"; do
    kafka /opt/kafka/bin/kafka-topics.sh --bootstrap-server localhost:9092 --create --if-not-exists \
      --topic "$topic" --partitions 4 --replication-factor 1
  done
}

install_chart() {
  step "helm install of charts/streamkeeper"
  helm upgrade --install streamkeeper charts/streamkeeper --namespace streamkeeper-system \
    --create-namespace --wait --timeout 5m
  kubectl -n streamkeeper-system get deployment,pods,lease
}

apply_job() {
  step "the example job, under Pod Security restricted"
  kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f -
  kubectl label namespace "$NS" --overwrite pod-security.kubernetes.io/enforce=restricted
  kubectl -n "$NS" create secret generic streamkeeper-s3 --dry-run=client -o yaml \
    --from-literal=AWS_ACCESS_KEY_ID=streamkeeper --from-literal=AWS_SECRET_ACCESS_KEY=streamkeeper-secret \
    | kubectl apply -f -
  # The example as it is, but for a one-broker Kafka and a checkpoint soon enough to be restored.
  kubectl create --dry-run=client -o json -f examples/card-count.yaml | python3 -c '
import json, sys
job = json.load(sys.stdin)
job["metadata"].pop("namespace", None)  # kubectl filled in the namespace of the context
job["spec"]["kafka"].update({"replicationFactor": 1, "minInsyncReplicas": 1})
job["spec"]["checkpoint"]["interval"] = "10s"
print(json.dumps(job))
' | kubectl -n "$NS" apply -f -
  kubectl -n "$NS" wait --for=condition=Ready "ssj/$JOB" --timeout=300s
  kubectl -n "$NS" get ssj "$JOB"
}

# Sets MOVED: the tasks $JOB-0 owned when it was force-deleted.
force_delete_mid_stream() {
  step "producing $FIRST_BATCH events, then $SECOND_BATCH more while a worker pod is force-deleted"
  produce 0 "$FIRST_BATCH"
  wait_caught_up 600
  MOVED=$(active_tasks_of "$JOB-0")
  [[ -n $MOVED ]] || die "$JOB-0 owns no task to move"
  produce "$FIRST_BATCH" "$SECOND_BATCH" "$SECOND_BATCH_PER_SECOND" &
  local producer=$!
  wait_until 120 "the second batch flowing through the job" consumed_at_least $((FIRST_BATCH + SECOND_BATCH / 10)) \
    || die "the job did not consume any of the second batch"
  kill -0 "$producer" 2>/dev/null || die "the input had stopped before the delete; the scenario needs it flowing"
  local victim_uid
  victim_uid=$(kubectl -n "$NS" get pod "$JOB-0" -o jsonpath='{.metadata.uid}')
  kubectl -n "$NS" delete pod "$JOB-0" --force --grace-period=0
  wait "$producer" || die "producing the second batch failed"
  new_pod() { [[ $(kubectl -n "$NS" get pod "$JOB-0" -o jsonpath='{.metadata.uid}' 2>/dev/null) != "$victim_uid" ]]; }
  wait_until 300 "a new $JOB-0" new_pod || die "$JOB-0 was not recreated"
  kubectl -n "$NS" wait --for=condition=Ready "pod/$JOB-0" --timeout=300s
  wait_caught_up 600
  kubectl -n "$NS" wait --for=condition=Ready "ssj/$JOB" --timeout=300s
}

check_output_exact() {
  step "checking the output exactly (read_committed)"
  local total=$((FIRST_BATCH + SECOND_BATCH)) output verdict
  output=$(mktemp)
  kafka /opt/kafka/bin/kafka-console-consumer.sh --bootstrap-server localhost:9092 --topic "$OUTPUT" \
    --from-beginning --isolation-level read_committed --timeout-ms 20000 \
    --property print.key=true --property 'key.separator=	' > "$output" 2>/dev/null || true
  verdict=$(python3 scripts/card-count-verdict.py "$output" "$total" "$CARDS") \
    || die "the output is NOT exact: $verdict"
  rm -f "$output"
  echo "$verdict"
}

check_recovery_shown() {
  step "the recovery as kubectl shows it"
  kubectl -n "$NS" get ssj "$JOB"
  wait_until 120 "the moves of tasks $MOVED off $JOB-0 in the status" moves_in_status "$JOB-0" "$MOVED" \
    || die "the status does not show tasks $MOVED moved off $JOB-0"
  kubectl -n "$NS" get ssj "$JOB" -o json | python3 -c '
import json, sys
print("task  owner          standbys (lag)        last move")
for t in json.load(sys.stdin)["status"]["tasks"]:
    m = t.get("lastPromotion") or t.get("lastHandoff") or {}
    standbys = ", ".join("%s (%s)" % (s["pod"], s.get("lag", "?")) for s in t.get("standbys", [])) or "-"
    print("%4d  %-13s  %-20s  %s" % (t["task"], t.get("owner", "-"), standbys,
          ("%s %s -> %s, " % (m["reason"], m["from"], m["to"]) + ("first commit %.2f s after the decision" % m["firstCommitSeconds"] if m.get("firstCommitSeconds") is not None else "no commit yet")) if m else "-"))
'
  wait_until 120 "the Events of the moves" move_events "$JOB-0" "$MOVED" \
    || die "no Promoted or HandedOff Event for each of tasks $MOVED off $JOB-0"
  kubectl -n "$NS" get events --field-selector "involvedObject.name=$JOB" --sort-by=.lastTimestamp
  local promoted moved
  promoted=$(promoted_tasks | cut -d' ' -f1 | sorted_words)
  moved=$(sorted_words <<< "$MOVED")
  [[ $promoted == "$moved" ]] \
    || die "promoted: tasks '$promoted', not the deleted pod's '$moved' once each: $(promoted_tasks | cut -d'|' -f2 | paste -sd';')"
}

run_scenario() {
  install_kafka_and_s3
  install_chart
  apply_job
  force_delete_mid_stream
  # The moves first: the output check runs a JVM consumer on the node, which on a 2-core machine
  # can starve a worker past its heartbeat timeout and cause a move of its own.
  check_recovery_shown
  check_output_exact
  log "PASSED ($PROVIDER): exact output through a force-deleted worker, its tasks' moves to their standbys shown in status and Events"
}
