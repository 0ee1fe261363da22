#!/usr/bin/env bash
# A real Apache Kafka broker on loopback for tests: one JVM in KRaft combined mode (broker and
# controller, node 1), its classpath collected from Maven Central by a tiny pom and cached.
#
#   tests/services/kafka.sh install   collect (or reuse) the jars
#   tests/services/kafka.sh start     install, format a fresh data dir, start, wait until a metadata
#                                     request succeeds, print the bootstrap address
#   tests/services/kafka.sh stop      stop exactly what start started
#   tests/services/kafka.sh pause     stop the broker only, keeping its data dir
#   tests/services/kafka.sh resume    start the broker again on the same data dir, wait until ready
#   tests/services/kafka.sh env       print SK_KAFKA_BOOTSTRAP=... for eval
#   tests/services/kafka.sh tool <class> [args...]
#                                     run a Kafka CLI class on the cached classpath, e.g.
#                                     tool org.apache.kafka.tools.TopicCommand --bootstrap-server ... --list
source "$(dirname "$0")/lib.sh"

KAFKA_VERSION="${SK_KAFKA_VERSION:-4.1.1}"
LOG4J_VERSION="${SK_LOG4J_VERSION:-2.25.3}"
SLF4J_VERSION="${SK_SLF4J_VERSION:-2.0.17}"
HOME_DIR="$SK_CACHE/kafka/$KAFKA_VERSION"
LIBS="$HOME_DIR/libs"
STAMP="$HOME_DIR/libs.complete"
STATE="$SK_RUN/kafka"
PORT="${SK_KAFKA_PORT:-19092}"
CONTROLLER_PORT="${SK_KAFKA_CONTROLLER_PORT:-19093}"
BOOTSTRAP="127.0.0.1:$PORT"
PIDFILE="$STATE/kafka.pid"
SERVER_LOG="$STATE/server.log"   # log4j INFO and up
CONSOLE_LOG="$STATE/kafka.out"   # stdout/stderr of the JVM (log4j WARN and up)
# wait_until silences its check; keep a handle on stderr so a check can still say why it gave up.
exec {ERR_FD}>&2

# Kafka 4.x brokers need Java 17 or newer: use $JAVA_HOME if it has one, else java on the PATH.
find_java() {
  [[ -n ${JAVA:-} ]] && return 0
  local j
  if [[ -n ${JAVA_HOME:-} && -x $JAVA_HOME/bin/java ]]; then j="$JAVA_HOME/bin/java"; else j=$(command -v java || true); fi
  [[ -n $j ]] || die "java is not installed (Kafka $KAFKA_VERSION needs Java 17 or newer)"
  local major
  major=$("$j" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java\.specification\.version = //p')
  [[ ${major:-0} =~ ^[0-9]+$ ]] && (( major >= 17 )) \
    || die "$j is Java ${major:-unknown}; Kafka $KAFKA_VERSION needs Java 17 or newer (set JAVA_HOME)"
  JAVA=$j
}

install() {
  if [[ -f $STAMP && -d $LIBS ]]; then
    return 0
  fi
  command -v mvn >/dev/null || die "mvn is not installed"
  mkdir -p "$HOME_DIR"
  # A half-finished download leaves no stamp: start that one over.
  rm -rf "$LIBS"
  cat > "$HOME_DIR/pom.xml" <<POM
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.streamkeeper.test</groupId>
  <artifactId>kafka-server-classpath</artifactId>
  <version>$KAFKA_VERSION</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <!-- CLI classes (TopicCommand, console producer/consumer) used for readiness and by tests -->
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-tools</artifactId>
      <version>$KAFKA_VERSION</version>
      <exclusions>
        <!-- only the Connect tools need it, and it drags Jetty and Jersey onto the classpath -->
        <exclusion><groupId>org.apache.kafka</groupId><artifactId>connect-runtime</artifactId></exclusion>
      </exclusions>
    </dependency>
    <!-- kafka_2.13's POM brings no logging backend, and slf4j-api 1.7.36, which does not see
         log4j-slf4j2-impl's provider (the broker would log nothing): raise it to 2.0.x -->
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-api</artifactId>
      <version>$SLF4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j2-impl</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
  </dependencies>
</project>
POM
  log "collecting Kafka $KAFKA_VERSION jars from Maven Central into $LIBS"
  (
    cd "$HOME_DIR"
    mvn -q -B -Dstyle.color=never -Dmaven.repo.local="$SK_CACHE/m2" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory=libs > mvn.log 2>&1
  ) || die "collecting the Kafka $KAFKA_VERSION classpath with mvn failed; see $HOME_DIR/mvn.log"
  ls "$LIBS/kafka_2.13-$KAFKA_VERSION.jar" "$LIBS/kafka-tools-$KAFKA_VERSION.jar" \
     "$LIBS/log4j-core-$LOG4J_VERSION.jar" "$LIBS/slf4j-api-$SLF4J_VERSION.jar" >/dev/null 2>&1 \
    || die "mvn finished but $LIBS lacks kafka_2.13, kafka-tools, log4j-core or slf4j-api 2.x"
  touch "$STAMP"
  log "collected $(ls "$LIBS" | wc -l) jars"
}

write_config() {
  mkdir -p "$STATE"
  cat > "$STATE/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$STATE/data
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
group.initial.rebalance.delay.ms=0
log.cleaner.backoff.ms=500
PROPS
  cat > "$STATE/log4j2.properties" <<LOG4J
status = warn
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
appender.console.filter.threshold.type = ThresholdFilter
appender.console.filter.threshold.level = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = $SERVER_LOG
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.console.ref = console
rootLogger.appenderRef.file.ref = file
LOG4J
  # The CLI classes log errors only, to stderr.
  cat > "$STATE/tools-log4j2.properties" <<LOG4J
status = error
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = error
rootLogger.appenderRef.console.ref = console
LOG4J
}

# JVM options of the short-lived CLI JVMs: small, quick to start, errors only, to stderr.
tool_opts() {
  [[ -f $STATE/tools-log4j2.properties ]] || write_config
  TOOL_OPTS=(-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1
    -Dlog4j2.configurationFile="$STATE/tools-log4j2.properties" -cp "$LIBS/*")
}

# tool <class> [args...]: runs a Kafka CLI class on the cached classpath.
tool() {
  find_java; tool_opts
  "$JAVA" "${TOOL_OPTS[@]}" "$@"
}

running() { [[ -f $PIDFILE ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

# One readiness probe: the broker answers a metadata request (list topics). Gives up on the
# whole start at once if the broker process has exited.
ready() {
  running || die "Kafka exited during startup; see $SERVER_LOG and $CONSOLE_LOG" 2>&"$ERR_FD"
  port_answers "$PORT" || return 1
  timeout 30 "$JAVA" "${TOOL_OPTS[@]}" org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP" --list
}

launch_broker() {
  require_free_port "$PORT"; require_free_port "$CONTROLLER_PORT"
  find_java; tool_opts
  nohup "$JAVA" -Xmx1g -Xms256m -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$STATE/log4j2.properties" \
    -cp "$LIBS/*" kafka.Kafka "$STATE/server.properties" >> "$CONSOLE_LOG" 2>&1 {ERR_FD}>&- &
  echo $! > "$PIDFILE"
  wait_until 90 "Kafka $KAFKA_VERSION" ready \
    || die "Kafka did not answer a metadata request on $BOOTSTRAP within 90 s; see $SERVER_LOG and $CONSOLE_LOG"
}

start() {
  install
  if running; then
    log "already running"; echo "$BOOTSTRAP"; return 0
  fi
  rm -rf "$STATE"
  write_config
  find_java
  local cluster_id
  cluster_id=$(tool kafka.tools.StorageTool random-uuid) || die "kafka.tools.StorageTool random-uuid failed"
  # Static controller.quorum.voters: a plain format, no --standalone (that is for dynamic quorums).
  tool kafka.tools.StorageTool format -t "$cluster_id" -c "$STATE/server.properties" > "$STATE/format.log" 2>&1 \
    || die "formatting the Kafka data dir failed; see $STATE/format.log"
  launch_broker
  log "Kafka $KAFKA_VERSION (cluster $cluster_id) at $BOOTSTRAP"
  echo "$BOOTSTRAP"
}

pause() {
  running || die "Kafka is not running (nothing to pause)"
  stop_pidfile "$PIDFILE" kafka
}

resume() {
  if running; then
    log "already running"; echo "$BOOTSTRAP"; return 0
  fi
  [[ -f $STATE/server.properties && -f $STATE/data/meta.properties ]] \
    || die "no formatted Kafka data dir under $STATE to resume on; run: $0 start"
  install
  log "resuming Kafka on $STATE/data"
  launch_broker
  log "Kafka $KAFKA_VERSION at $BOOTSTRAP"
  echo "$BOOTSTRAP"
}

stop() {
  stop_pidfile "$PIDFILE" kafka
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  pause) pause ;;
  resume) resume ;;
  env) echo "SK_KAFKA_BOOTSTRAP=$BOOTSTRAP" ;;
  tool) shift; install; tool "$@" ;;
  *) die "usage: $0 install|start|stop|pause|resume|env|tool <class> [args...]" ;;
esac
