#!/usr/bin/env bash
# End-to-end on kind: the images, the Helm chart and the example job in a real cluster.
#
#   tests/e2e/kind.sh          create the cluster (kind-config.yaml), run the scenario, delete the cluster
#   tests/e2e/kind.sh --keep   leave the cluster running afterwards (kubectl --context kind-streamkeeper-e2e)
#
# 1. builds the operator and worker images (scripts/images.sh build) and loads them into kind;
# 2. installs Kafka (KRaft, one broker) and SeaweedFS S3 from tests/e2e/manifests;
# 3. `helm install` of charts/streamkeeper;
# 4. applies examples/card-count.yaml (with replication factor 1 and a 10 s checkpoint interval:
#    one broker), produces input and, mid-stream, `kubectl delete pod --force --grace-period=0`
#    of a worker;
# 5. checks, read_committed, that every card's counts are 1, 2, ..., n with n its events (what an
#    uninterrupted run outputs: no loss, no duplicate), and that `kubectl get ssj`, the status
#    and the Events show the deleted pod's tasks moved to their standbys.
#
# Needs Docker (an engine that answers), kind, kubectl and helm. Without them it SKIPS (exit 0)
# with a loud message: it cannot run on a machine without a container engine.
source "$(dirname "$0")/../services/lib.sh"
cd "$(dirname "$0")/../.."

CLUSTER="${SK_KIND_CLUSTER:-streamkeeper-e2e}"
KEEP=false
[[ ${1:-} == --keep ]] && KEEP=true
NS=e2e
JOB=card-count
INPUT=card-transactions
OUTPUT=card-counts
CARDS=200
FIRST_BATCH=20000
SECOND_BATCH=20000

skip() {
  printf '\n%s\n' "************************************************************************" >&2
  printf '*** SKIPPED: tests/e2e/kind.sh did NOT run: %s\n' "$1" >&2
  printf '*** %s\n' "It needs a Docker engine, kind, kubectl and helm; nothing was tested." >&2
  printf '%s\n\n' "************************************************************************" >&2
  exit 0
}
command -v docker >/dev/null || skip "docker is not installed"
docker info >/dev/null 2>&1 || skip "no Docker engine answers (docker info failed)"
command -v kind >/dev/null || skip "kind is not installed (go install sigs.k8s.io/kind@latest)"
if command -v kubectl >/dev/null; then KUBECTL=kubectl
elif [[ -x ${SK_KUBE_BIN:-}/kubectl ]]; then KUBECTL=$SK_KUBE_BIN/kubectl
else skip "kubectl is not installed"; fi
if command -v helm >/dev/null; then HELM=helm
else
  tests/services/helm.sh install || skip "helm is not installed and could not be built"
  HELM=$(tests/services/helm.sh env | sed -n 's/^SK_HELM=//p')
fi

kubectl() { "$KUBECTL" --context "kind-$CLUSTER" "$@"; }
helm() { "$HELM" --kube-context "kind-$CLUSTER" "$@"; }
step() { printf '\n\033[1m== %s\033[0m (%s)\n' "$*" "$(date +%T)"; }

created=false
cleanup() {
  local status=$?
  if (( status != 0 )); then
    log "FAILED (status $status); the cluster's state:"
    kubectl get ssj,sts,pods -A -o wide 2>/dev/null || true
    kubectl -n streamkeeper-system logs -l app.kubernetes.io/name=streamkeeper-operator --tail 50 2>/dev/null || true
  fi
  if $created && ! $KEEP; then kind delete cluster --name "$CLUSTER" || true; fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step "kind cluster $CLUSTER (kind-config.yaml: 1 control plane, 2 workers in zone-a and zone-b)"
if ! kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  kind create cluster --name "$CLUSTER" --config kind-config.yaml --wait 120s
  created=true
fi

step "building the images and loading them into kind"
scripts/images.sh build
mapfile -t images < <(scripts/images.sh names)
for image in "${images[@]}"; do kind load docker-image "$image" --name "$CLUSTER"; done

step "Kafka (KRaft, one broker) and SeaweedFS S3"
kubectl apply -f tests/e2e/manifests/kafka.yaml -f tests/e2e/manifests/seaweedfs.yaml
kubectl -n kafka rollout status statefulset/kafka --timeout=300s
kubectl -n storage rollout status deployment/seaweedfs --timeout=300s
kubectl -n storage wait --for=condition=Complete job/create-bucket --timeout=300s
kafka() { kubectl -n kafka exec -i kafka-0 -- "$@"; }
for topic in "$INPUT" "$OUTPUT"; do
  kafka /opt/kafka/bin/kafka-topics.sh --bootstrap-server localhost:9092 --create --if-not-exists \
    --topic "$topic" --partitions 4 --replication-factor 1
done

step "helm install of charts/streamkeeper"
helm upgrade --install streamkeeper charts/streamkeeper --namespace streamkeeper-system \
  --create-namespace --wait --timeout 5m
kubectl -n streamkeeper-system get deployment,pods,lease

step "the example job"
kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f -
kubectl -n "$NS" create secret generic streamkeeper-s3 --dry-run=client -o yaml \
  --from-literal=AWS_ACCESS_KEY_ID=streamkeeper --from-literal=AWS_SECRET_ACCESS_KEY=streamkeeper-secret \
  | kubectl apply -f -
# The example as it is, but for a one-broker Kafka and a checkpoint soon enough to be restored.
kubectl create --dry-run=client -o json -f examples/card-count.yaml | python3 -c '
import json, sys
job = json.load(sys.stdin)
job["spec"]["kafka"].update({"replicationFactor": 1, "minInsyncReplicas": 1})
job["spec"]["checkpoint"]["interval"] = "10s"
print(json.dumps(job))
' | kubectl -n "$NS" apply -f -
kubectl -n "$NS" wait --for=condition=Ready "ssj/$JOB" --timeout=300s
kubectl -n "$NS" get ssj "$JOB"

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
  events "$1" "$2" | kafka /opt/kafka/bin/kafka-console-producer.sh --bootstrap-server localhost:9092 \
    --topic "$INPUT" --property parse.key=true --property 'key.separator=	' >/dev/null
}
lag() {
  kafka /opt/kafka/bin/kafka-consumer-groups.sh --bootstrap-server localhost:9092 --describe \
    --group "$NS.$JOB" 2>/dev/null \
    | awk -v t="$INPUT" '$2 == t && $4 != "-" { lag += $6; n++ } END { if (n == 4) print lag; else print -1 }'
}
caught_up() { [[ $(lag) == 0 ]]; }
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

step "producing $FIRST_BATCH events, then $SECOND_BATCH more while a worker pod is force-deleted"
produce 0 "$FIRST_BATCH"
wait_caught_up 600
moved=$(active_tasks_of "$JOB-0")
[[ -n $moved ]] || die "$JOB-0 owns no task to move"
produce "$FIRST_BATCH" "$SECOND_BATCH" &
producer=$!
sleep 2
victim_uid=$(kubectl -n "$NS" get pod "$JOB-0" -o jsonpath='{.metadata.uid}')
kubectl -n "$NS" delete pod "$JOB-0" --force --grace-period=0
wait "$producer"
new_pod() { [[ $(kubectl -n "$NS" get pod "$JOB-0" -o jsonpath='{.metadata.uid}' 2>/dev/null) != "$victim_uid" ]]; }
wait_until 300 "a new $JOB-0" new_pod || die "$JOB-0 was not recreated"
kubectl -n "$NS" wait --for=condition=Ready "pod/$JOB-0" --timeout=300s
wait_caught_up 600
kubectl -n "$NS" wait --for=condition=Ready "ssj/$JOB" --timeout=300s

step "checking the output exactly (read_committed)"
total=$((FIRST_BATCH + SECOND_BATCH))
output=$(mktemp)
kafka /opt/kafka/bin/kafka-console-consumer.sh --bootstrap-server localhost:9092 --topic "$OUTPUT" \
  --from-beginning --isolation-level read_committed --timeout-ms 20000 \
  --property print.key=true --property 'key.separator=	' > "$output" 2>/dev/null || true
verdict=$(python3 - "$output" "$total" "$CARDS" <<'PY'
import collections, json, sys
path, total, cards = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
expected = collections.Counter(f"card-{(i * 7919) % cards}" for i in range(total))
seen = collections.defaultdict(list)
for line in open(path):
    key, value = line.rstrip("\n").split("\t", 1)
    seen[key].append(json.loads(value)["count"])
bad = [k for k in expected if seen.get(k) != list(range(1, expected[k] + 1))]
extra = set(seen) - set(expected)
print(json.dumps({"cards": len(expected), "events": total, "output_records": sum(map(len, seen.values())),
                  "exact": not bad and not extra, "wrong_cards": sorted(bad)[:5]}))
PY
)
echo "$verdict"
python3 -c 'import json,sys; sys.exit(0 if json.loads(sys.argv[1])["exact"] else 1)' "$verdict" \
  || die "the output is NOT exact: $verdict"

step "the recovery as kubectl shows it"
kubectl -n "$NS" get ssj "$JOB"
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
wait_until 120 "the moves of tasks $moved off $JOB-0 in the status" moves_in_status "$JOB-0" "$moved" \
  || die "the status does not show tasks $moved moved off $JOB-0"
kubectl -n "$NS" get ssj "$JOB" -o json | python3 -c '
import json, sys
print("task  owner          standbys (lag)        last move")
for t in json.load(sys.stdin)["status"]["tasks"]:
    m = t.get("lastPromotion") or t.get("lastHandoff") or {}
    standbys = ", ".join("%s (%s)" % (s["pod"], s.get("lag", "?")) for s in t.get("standbys", [])) or "-"
    print("%4d  %-13s  %-20s  %s" % (t["task"], t.get("owner", "-"), standbys,
          "%s %s -> %s, first commit %.2f s after the decision" % (m["reason"], m["from"], m["to"], m["firstCommitSeconds"]) if m else "-"))
'
wait_until 120 "the Events of the moves" move_events "$JOB-0" "$moved" \
  || die "no Promoted or HandedOff Event for each of tasks $moved off $JOB-0"
kubectl -n "$NS" get events --field-selector "involvedObject.name=$JOB" --sort-by=.lastTimestamp
log "PASSED: exact output through a force-deleted worker, its tasks' moves to their standbys shown in status and Events"
