# shellcheck shell=bash
# `tests/e2e/images.sh check`: runs the stand-in images in a private containerd the way the e2e
# manifests run the upstream ones, and fails loudly when one does not behave. Sourced by
# tests/e2e/images.sh (after tests/services/lib.sh; uses its local_ref and archive), never run.
#
# The containers share this machine's network (ctr has no CNI), so everything they open is bound
# to 127.0.0.1 on free ports, and the check fails if any socket of theirs listens elsewhere.
# Everything waits on a condition, never a fixed time, and everything started is stopped: the
# private containerd (its own root, state and socket under $CHECK_DIR) with every task it ran.
CHECK_DIR=/tmp/sk-containerd-stand-ins
# The containers' logs, kept after the check (the private containerd's folder is removed).
LOGS=$SK_RUN/stand-ins-check
# shellcheck source=scripts/private-containerd.sh
source scripts/private-containerd.sh
# wait_until silences its check; keep a handle on stderr so a check can still say why it gave up.
exec {ERR_FD}>&2
EXEC_COUNT=0

# free_ports <n>: n distinct free loopback ports, each with its +10000 neighbour free as well
# (SeaweedFS puts a component's gRPC port there).
free_ports() {
  local picked=() port
  while (( ${#picked[@]} < $1 )); do
    port=$(( 20000 + RANDOM % 10000 ))
    [[ " ${picked[*]} " == *" $port "* ]] && continue
    if port_is_free "$port" && port_is_free $(( port + 10000 )); then picked+=("$port"); fi
  done
  echo "${picked[@]}"
}

# in_task <container> <command...>: runs the command inside the container's running task.
in_task() {
  EXEC_COUNT=$(( EXEC_COUNT + 1 ))
  pctr tasks exec --exec-id "check-$EXEC_COUNT" "$@"
}

task_running() {
  pctr tasks ls | awk -v id="$1" '$1 == id && $3 == "RUNNING" { found = 1 } END { exit !found }'
}

# alive <container>: the task still runs, or the whole check stops with the end of its log.
alive() {
  task_running "$1" && return 0
  tail -40 "$LOGS/$1.log" >&"$ERR_FD"
  die "$1 exited (the end of its log above; all of it in $LOGS/$1.log)" 2>&"$ERR_FD"
}

# stop_task <container>: SIGTERM, waits for the task to end, deletes it.
stop_task() {
  pctr tasks kill "$1" >/dev/null || die "could not signal $1"
  wait_until 90 "$1 stopped on SIGTERM" no_task_running "$1" || die "$1 did not stop within 90 s of SIGTERM"
  pctr tasks delete "$1" >/dev/null || die "could not delete the task of $1"
}

# loopback_only <container>: every listening socket of the container's processes is on 127.0.0.1.
loopback_only() {
  local pids line pid address listening=0 outside=()
  pids=" $(pctr tasks ps "$1" | awk 'NR > 1 { printf "%s ", $1 }')"
  while read -r line; do
    address=$(awk '{ print $5 }' <<< "$line")
    while read -r pid; do
      [[ $pids == *" $pid "* ]] || continue
      listening=$(( listening + 1 ))
      [[ $address == 127.0.0.1:* || $address == "[::ffff:127.0.0.1]:"* ]] || outside+=("$address")
    done < <(grep -o 'pid=[0-9]*' <<< "$line" | cut -d= -f2 | sort -u)
  done < <(ss -Hltunp)
  (( listening > 0 )) || die "no listening socket of $1 found (ss -ltunp)"
  (( ${#outside[@]} == 0 )) || die "$1 listens beyond loopback: ${outside[*]}"
  log "$1: all $listening listening sockets are on 127.0.0.1"
}

# expect <what> <pattern> <text>: the text has a line matching the extended regex, or the check fails.
expect() {
  grep -Eq -- "$2" <<< "$3" || { printf '%s\n' "$3" >&2; die "$1: no line matches /$2/ (output above)"; }
}

KAFKA=sk-check-kafka

kafka_ready() {
  alive "$KAFKA"
  grep -q "Kafka Server started" "$LOGS/$KAFKA.log" \
    && in_task "$KAFKA" /opt/kafka/bin/kafka-broker-api-versions.sh --bootstrap-server "$BOOTSTRAP" < /dev/null
}

start_kafka() {
  pctr tasks start -d --log-uri "file://$LOGS/$KAFKA.log" "$KAFKA" >/dev/null || die "could not restart $KAFKA"
}

check_kafka() {
  local ref port controller output expected
  ref=$(local_ref kafka)
  read -r port controller <<< "$(free_ports 2)"
  BOOTSTRAP=127.0.0.1:$port
  # The manifest's variables, its listeners on loopback ports; the last one checks the naming
  # rule (___ is -, __ is _, _ is .). No KAFKA_LOG_DIRS, no CLUSTER_ID: the defaults are checked.
  # KAFKA_JMX_OPTS without com.sun.management.jmxremote: with it (the image's default, as
  # upstream's) the JVM's local JMX connector listens on an ephemeral port of every address.
  # shellcheck disable=SC2054 # the commas are inside the values
  local env=(
    KAFKA_NODE_ID=1 KAFKA_PROCESS_ROLES=broker,controller
    "KAFKA_LISTENERS=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller"
    "KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://$BOOTSTRAP" KAFKA_CONTROLLER_LISTENER_NAMES=CONTROLLER
    KAFKA_LISTENER_SECURITY_PROTOCOL_MAP=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
    "KAFKA_CONTROLLER_QUORUM_VOTERS=1@127.0.0.1:$controller"
    KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR=1 KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR=1
    KAFKA_TRANSACTION_STATE_LOG_MIN_ISR=1 KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS=0
    KAFKA_LOG_CLEANER_BACKOFF_MS=500 KAFKA_STREAMKEEPER_CHECK___DASH__UNDERSCORE=yes
    KAFKA_JMX_OPTS=-Dcom.sun.management.jmxremote.ssl=false
    # What the kubelet adds for the manifest's Service named kafka (service links): the image
    # turns them into properties too (port=..., service.host=...), which the broker must bear.
    KAFKA_SERVICE_HOST=10.96.0.20 KAFKA_SERVICE_PORT=9092 KAFKA_SERVICE_PORT_BROKER=9092
    KAFKA_PORT=tcp://10.96.0.20:9092 KAFKA_PORT_9092_TCP=tcp://10.96.0.20:9092
    KAFKA_PORT_9092_TCP_PROTO=tcp KAFKA_PORT_9092_TCP_PORT=9092 KAFKA_PORT_9092_TCP_ADDR=10.96.0.20
  )
  local env_flags=() variable
  for variable in "${env[@]}"; do env_flags+=(--env "$variable"); done
  log "starting $ref as the manifest does (its own command, KAFKA_* variables only) on $BOOTSTRAP"
  pctr run -d --net-host --log-uri "file://$LOGS/$KAFKA.log" "${env_flags[@]}" "$ref" "$KAFKA" >/dev/null \
    || die "could not start $ref"
  wait_until 120 "Kafka in $ref" kafka_ready \
    || die "the broker did not answer kafka-broker-api-versions.sh within 120 s; see $LOGS/$KAFKA.log"
  output=$(cat "$LOGS/$KAFKA.log")
  expect "the entrypoint's user" '^uid=1000\(appuser\)' "$output"
  expect "the CLUSTER_ID default" 'CLUSTER_ID not set' "$output"

  output=$(in_task "$KAFKA" cat /opt/kafka/config/server.properties)
  for expected in node.id=1 process.roles=broker,controller "listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller" \
      "controller.quorum.voters=1@127.0.0.1:$controller" log.cleaner.backoff.ms=500 \
      streamkeeper.check-dash_underscore=yes; do
    expect "server.properties from the KAFKA_* variables" "^${expected//./\\.}\$" "$output"
  done
  output=$(in_task "$KAFKA" /opt/kafka/bin/kafka-storage.sh info -c /opt/kafka/config/server.properties < /dev/null)
  expect "the log dir formatted on first start (kafka-storage.sh info)" '5L6g3nShT-eMCtK--X86sw' "$output"

  in_task "$KAFKA" /opt/kafka/bin/kafka-topics.sh --bootstrap-server "$BOOTSTRAP" --create --if-not-exists \
    --topic sk-check --partitions 2 --replication-factor 1 < /dev/null || die "kafka-topics.sh --create failed"
  output=$(in_task "$KAFKA" /opt/kafka/bin/kafka-topics.sh --bootstrap-server "$BOOTSTRAP" --describe --topic sk-check < /dev/null)
  expect "kafka-topics.sh --describe" 'PartitionCount: 2' "$output"
  printf 'card-1:1\ncard-2:2\ncard-3:3\n' | in_task "$KAFKA" /opt/kafka/bin/kafka-console-producer.sh \
    --bootstrap-server "$BOOTSTRAP" --topic sk-check --property parse.key=true --property key.separator=: \
    || die "kafka-console-producer.sh failed"
  output=$(in_task "$KAFKA" /opt/kafka/bin/kafka-console-consumer.sh --bootstrap-server "$BOOTSTRAP" \
    --topic sk-check --group sk-check --from-beginning --isolation-level read_committed --max-messages 3 \
    --timeout-ms 60000 --property print.key=true --property key.separator=: < /dev/null | sort)
  [[ $output == $'card-1:1\ncard-2:2\ncard-3:3' ]] || die "kafka-console-consumer.sh read back: $output"
  output=$(in_task "$KAFKA" /opt/kafka/bin/kafka-consumer-groups.sh --bootstrap-server "$BOOTSTRAP" \
    --describe --group sk-check < /dev/null)
  expect "kafka-consumer-groups.sh --describe" '^sk-check +sk-check +[01] ' "$output"
  loopback_only "$KAFKA"

  log "restarting the broker on its formatted log dir"
  stop_task "$KAFKA"
  start_kafka
  wait_until 120 "Kafka restarted" kafka_ready || die "the restarted broker did not answer within 120 s"
  expect "the restart's setup" 'already formatted' "$(cat "$LOGS/$KAFKA.log")"
  output=$(in_task "$KAFKA" /opt/kafka/bin/kafka-topics.sh --bootstrap-server "$BOOTSTRAP" --list < /dev/null)
  expect "the topic after the restart" '^sk-check$' "$output"
  stop_task "$KAFKA"
  pctr containers delete "$KAFKA" || die "could not delete $KAFKA"
  log "$ref behaves as apache/kafka for the manifest and tests/e2e/kind.sh"
}

SEAWEEDFS=sk-check-seaweedfs
S3_KEY=streamkeeper
S3_SECRET=streamkeeper-secret

s3_curl() {
  curl -s --max-time 10 --aws-sigv4 "aws:amz:us-east-1:s3" --user "$S3_KEY:$S3_SECRET" "$@"
}

s3_ready() {
  alive "$SEAWEEDFS"
  [[ $(s3_curl -o /dev/null -w '%{http_code}' "$S3/") == 200 ]]
}

has_bucket() { s3_curl "$S3/" | grep -q '<Name>sk-check-bucket</Name>'; }

# The image's Entrypoint, from the archive's config: what the kubelet puts before a pod's args.
entrypoint_of() {
  tar -xOf "$1" index.json | python3 -c '
import json, sys, tarfile
archive = tarfile.open(sys.argv[1])
blob = lambda d: json.load(archive.extractfile("blobs/sha256/" + d["digest"][7:]))
config = blob(blob(json.load(sys.stdin)["manifests"][0])["config"])
print("\n".join(config["config"]["Entrypoint"]))' "$1"
}

check_seaweedfs() {
  local ref dir entrypoint s3 master volume filer iceberg lance pid
  ref=$(local_ref seaweedfs)
  read -r s3 master volume filer iceberg lance <<< "$(free_ports 6)"
  S3=http://127.0.0.1:$s3
  dir=$CHECK_DIR/seaweedfs
  mkdir -p "$dir/data" "$dir/config"
  cat > "$dir/config/s3.json" <<JSON
{"identities": [{"name": "streamkeeper", "credentials": [{"accessKey": "$S3_KEY", "secretKey": "$S3_SECRET"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
JSON
  mapfile -t entrypoint < <(entrypoint_of "$(archive seaweedfs)")
  (( ${#entrypoint[@]} )) || die "$(archive seaweedfs) has no Entrypoint"
  # The manifest's args (on loopback, every port free) after the image's entrypoint, as the
  # kubelet runs them; /data and /etc/seaweedfs mounted as its volumes are.
  local args=(server -dir=/data -ip=127.0.0.1 -ip.bind=127.0.0.1 -s3 "-s3.port=$s3"
    -s3.config=/etc/seaweedfs/s3.json "-master.port=$master" "-volume.port=$volume"
    "-filer.port=$filer" "-s3.port.iceberg=$iceberg" "-s3.port.lance=$lance" -master.telemetry=false)
  log "starting $ref: ${entrypoint[*]} ${args[*]}"
  pctr run -d --net-host --log-uri "file://$LOGS/$SEAWEEDFS.log" \
    --mount "type=bind,src=$dir/data,dst=/data,options=rbind:rw" \
    --mount "type=bind,src=$dir/config,dst=/etc/seaweedfs,options=rbind:ro" \
    "$ref" "$SEAWEEDFS" "${entrypoint[@]}" "${args[@]}" >/dev/null || die "could not start $ref"
  wait_until 120 "SeaweedFS S3 in $ref" s3_ready \
    || die "S3 on $S3 did not answer a signed request within 120 s; see $LOGS/$SEAWEEDFS.log"
  pid=$(pctr tasks ls | awk -v id="$SEAWEEDFS" '$1 == id { print $2 }')
  [[ $(awk '/^Uid:/ { print $2 }' "/proc/$pid/status") == 1000 ]] \
    || die "weed server (pid $pid) does not run as the seaweed user (uid 1000)"
  [[ $(stat -c %u "$dir/data") == 1000 ]] || die "the entrypoint did not give /data to the seaweed user"
  expect "weed server's log on stderr" 'Start Seaweed' "$(cat "$LOGS/$SEAWEEDFS.log")"

  log "creating a bucket as the manifest's Job does (sh -c, weed shell)"
  pctr run --rm --net-host "$ref" sk-check-weed-shell sh -c \
    "echo 's3.bucket.create -name sk-check-bucket' | weed shell -master=127.0.0.1:$master -filer=127.0.0.1:$filer" \
    || die "weed shell s3.bucket.create failed"
  wait_until 30 "bucket sk-check-bucket listed" has_bucket || die "the bucket weed shell made is not listed on $S3"
  printf 'checked' > "$dir/object"
  [[ $(s3_curl -o /dev/null -w '%{http_code}' -T "$dir/object" "$S3/sk-check-bucket/object") == 200 ]] \
    || die "PUT of an object into sk-check-bucket failed"
  [[ $(s3_curl "$S3/sk-check-bucket/object") == checked ]] || die "GET of the object did not read it back"
  loopback_only "$SEAWEEDFS"
  stop_task "$SEAWEEDFS"
  pctr containers delete "$SEAWEEDFS" || die "could not delete $SEAWEEDFS"
  log "$ref behaves as chrislusf/seaweedfs for the manifest"
}

check() {
  [[ $(id -u) -eq 0 ]] || die "running containers needs root"
  if ! command -v curl >/dev/null || ! command -v ss >/dev/null; then
    die "the check needs curl and ss (iproute2)"
  fi
  local target file
  for target in "${TARGETS[@]}"; do
    file=$(archive "$target")
    [[ -f $file ]] || die "$file is missing: run $0 build"
  done
  rm -rf "$LOGS"
  mkdir -p "$LOGS"
  start_containerd
  trap stop_containerd EXIT
  for target in "${TARGETS[@]}"; do
    pctr images import "$(archive "$target")" >/dev/null || die "importing $(archive "$target") failed"
    "check_$target"
  done
  pctr images ls
}
