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
#   tests/services/kafka.sh env       print SK_KAFKA_BOOTSTRAP=... and the TLS/SASL lines below,
#                                     one KEY=value a line, for export
#   tests/services/kafka.sh tool <class> [args...]
#                                     run a Kafka CLI class on the cached classpath, e.g.
#                                     tool org.apache.kafka.tools.TopicCommand --bootstrap-server ... --list
#
# Listeners, all on 127.0.0.1:
#   PLAINTEXT  $SK_KAFKA_PORT (19092)             plaintext; also the inter-broker listener
#   CONTROLLER $SK_KAFKA_CONTROLLER_PORT (19093)  plaintext; KRaft controller only
#   SASL_SSL   $SK_KAFKA_SASL_SSL_PORT (19094)    TLS (server cert only) + SASL SCRAM-SHA-512 or PLAIN,
#                                                 user streamkeeper / streamkeeper-test-secret
#   MTLS       $SK_KAFKA_MTLS_PORT (19095)        protocol SSL with a client certificate required
#
# Each `start` makes a fresh test CA, a server cert (SAN IP:127.0.0.1, DNS:localhost) and a client
# cert (CN=streamkeeper-test-client), EC P-256, all PEM with unencrypted PKCS#8 keys, under
# $STATE/tls; `pause`/`resume` keep them (and the data dir, whose metadata log holds the SCRAM
# credential: in KRaft it is added when formatting, `kafka-storage format --add-scram ...`).
# `env` prints, beside SK_KAFKA_BOOTSTRAP:
#   SK_KAFKA_SASL_SSL_BOOTSTRAP, SK_KAFKA_MTLS_BOOTSTRAP, SK_KAFKA_CA_PEM (the CA to trust),
#   SK_KAFKA_CLIENT_CERT_PEM, SK_KAFKA_CLIENT_KEY_PEM (the mTLS client's cert and key),
#   SK_KAFKA_SASL_USERNAME, SK_KAFKA_SASL_PASSWORD.
# For the Java CLI classes (`tool ... --command-config FILE`), start also writes client configs:
#   $STATE/client-scram.properties, $STATE/client-plain.properties, $STATE/client-mtls.properties.
#
# A second broker beside the first needs its own ports and its own state dir, e.g.
#   STREAMKEEPER_RUN=/tmp/sk-run2 SK_KAFKA_PORT=29092 SK_KAFKA_CONTROLLER_PORT=29093 \
#     SK_KAFKA_SASL_SSL_PORT=29094 SK_KAFKA_MTLS_PORT=29095 tests/services/kafka.sh start
# (the jar cache is shared; every later command of that broker needs the same variables).
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
SASL_SSL_PORT="${SK_KAFKA_SASL_SSL_PORT:-19094}"
MTLS_PORT="${SK_KAFKA_MTLS_PORT:-19095}"
BOOTSTRAP="127.0.0.1:$PORT"
SASL_SSL_BOOTSTRAP="127.0.0.1:$SASL_SSL_PORT"
MTLS_BOOTSTRAP="127.0.0.1:$MTLS_PORT"
# Test credentials, nothing secret: the SCRAM-SHA-512 and PLAIN user of the SASL_SSL listener.
SASL_USERNAME=streamkeeper
SASL_PASSWORD=streamkeeper-test-secret
TLS_DIR="$STATE/tls"
CA_PEM="$TLS_DIR/ca.pem"                     # the test CA's certificate: the trust anchor
SERVER_KEYSTORE="$TLS_DIR/server-keystore.pem"  # broker key (PKCS#8) + cert chain, ssl.keystore.type=PEM
CLIENT_CERT_PEM="$TLS_DIR/client.pem"        # client certificate (CN=streamkeeper-test-client)
CLIENT_KEY_PEM="$TLS_DIR/client.key"         # its key, unencrypted PKCS#8 PEM
CLIENT_KEYSTORE="$TLS_DIR/client-keystore.pem"  # key + cert in one file, for Java clients
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
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT,SASL_SSL://127.0.0.1:$SASL_SSL_PORT,MTLS://127.0.0.1:$MTLS_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT,SASL_SSL://127.0.0.1:$SASL_SSL_PORT,MTLS://127.0.0.1:$MTLS_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,MTLS:SSL
# TLS and SASL only on their own listeners (PEM key stores: an unencrypted PKCS#8 key, so no
# ssl.key.password; a PEM key store takes no ssl.keystore.password either).
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=$SERVER_KEYSTORE
listener.name.sasl_ssl.ssl.client.auth=none
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$SASL_USERNAME="$SASL_PASSWORD";
listener.name.mtls.ssl.keystore.type=PEM
listener.name.mtls.ssl.keystore.location=$SERVER_KEYSTORE
listener.name.mtls.ssl.truststore.type=PEM
listener.name.mtls.ssl.truststore.location=$CA_PEM
listener.name.mtls.ssl.client.auth=required
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
# The coordinator looks for timed-out transactions every second (default 10 s), so a test of a
# transaction aborted by its timeout does not wait out the default cleanup interval.
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
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
  # Client configs for the Java CLI classes (--command-config / --consumer.config ...).
  cat > "$STATE/client-scram.properties" <<PROPS
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$SASL_USERNAME" password="$SASL_PASSWORD";
ssl.truststore.type=PEM
ssl.truststore.location=$CA_PEM
PROPS
  cat > "$STATE/client-plain.properties" <<PROPS
security.protocol=SASL_SSL
sasl.mechanism=PLAIN
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="$SASL_USERNAME" password="$SASL_PASSWORD";
ssl.truststore.type=PEM
ssl.truststore.location=$CA_PEM
PROPS
  cat > "$STATE/client-mtls.properties" <<PROPS
security.protocol=SSL
ssl.truststore.type=PEM
ssl.truststore.location=$CA_PEM
ssl.keystore.type=PEM
ssl.keystore.location=$CLIENT_KEYSTORE
PROPS
}

# make_tls: a fresh test CA, and a server and a client certificate it signs, all EC P-256 PEM
# with unencrypted PKCS#8 keys ("BEGIN PRIVATE KEY": what Kafka's PEM key store and librdkafka
# read). The server cert names 127.0.0.1 and localhost, for clients that verify the host name.
make_tls() {
  command -v openssl >/dev/null || die "openssl is not installed (it makes the test TLS certificates)"
  mkdir -p "$TLS_DIR"
  # Our own minimal openssl config, so the system's openssl.cnf adds no extensions of its own.
  cat > "$TLS_DIR/openssl.cnf" <<'CNF'
[req]
distinguished_name = dn
prompt = no
[dn]
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
CNF
  # (set -e does not act inside a command followed by ||: every step is chained with &&.)
  tls_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }
  # tls_sign <name> <subject> <extensions section>: <name>.key, and <name>.pem signed by the CA
  tls_sign() {
    tls_key "$1.key" \
      && openssl req -new -config openssl.cnf -key "$1.key" -subj "$2" -out "$1.csr" \
      && openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -set_serial "0x$(openssl rand -hex 16)" \
           -days 3650 -sha256 -extfile openssl.cnf -extensions "$3" -out "$1.pem" \
      && rm -f "$1.csr"
  }
  (
    cd "$TLS_DIR" \
      && tls_key ca.key \
      && openssl req -new -x509 -config openssl.cnf -extensions ca -key ca.key \
           -subj "/CN=streamkeeper-test-ca" -days 3650 -sha256 -out ca.pem \
      && tls_sign server "/CN=localhost" server \
      && tls_sign client "/CN=streamkeeper-test-client" client \
      && cat server.key server.pem ca.pem > "$SERVER_KEYSTORE" \
      && cat client.key client.pem > "$CLIENT_KEYSTORE" \
      && grep -qx -- '-----BEGIN PRIVATE KEY-----' server.key \
      && grep -qx -- '-----BEGIN PRIVATE KEY-----' client.key \
      && openssl verify -CAfile ca.pem server.pem client.pem
  ) > "$TLS_DIR/openssl.log" 2>&1 \
    || die "making the test TLS certificates with openssl failed; see $TLS_DIR/openssl.log"
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

# One readiness probe: the SASL_SSL and mTLS ports accept connections and the broker answers a
# metadata request (list topics) on PLAINTEXT. Gives up on the whole start at once if the broker
# process has exited.
ready() {
  running || die "Kafka exited during startup; see $SERVER_LOG and $CONSOLE_LOG" 2>&"$ERR_FD"
  port_answers "$PORT" && port_answers "$SASL_SSL_PORT" && port_answers "$MTLS_PORT" || return 1
  timeout 30 "$JAVA" "${TOOL_OPTS[@]}" org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP" --list
}

launch_broker() {
  require_free_port "$PORT"; require_free_port "$CONTROLLER_PORT"
  require_free_port "$SASL_SSL_PORT"; require_free_port "$MTLS_PORT"
  find_java; tool_opts
  nohup "$JAVA" -Xmx1g -Xms256m -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$STATE/log4j2.properties" \
    -cp "$LIBS/*" kafka.Kafka "$STATE/server.properties" >> "$CONSOLE_LOG" 2>&1 {ERR_FD}>&- &
  echo $! > "$PIDFILE"
  wait_until 90 "Kafka $KAFKA_VERSION" ready \
    || die "Kafka did not answer a metadata request on $BOOTSTRAP (and connections on $SASL_SSL_BOOTSTRAP, $MTLS_BOOTSTRAP) within 90 s; see $SERVER_LOG and $CONSOLE_LOG"
}

start() {
  install
  if running; then
    log "already running"; echo "$BOOTSTRAP"; return 0
  fi
  rm -rf "$STATE"
  write_config
  make_tls
  find_java
  local cluster_id
  cluster_id=$(tool kafka.tools.StorageTool random-uuid) || die "kafka.tools.StorageTool random-uuid failed"
  # Static controller.quorum.voters: a plain format, no --standalone (that is for dynamic quorums).
  # KRaft keeps SCRAM credentials in the metadata log: the first one is written at format time
  # (kafka-configs --alter --add-config 'SCRAM-SHA-512=[...]' could add more on a running broker).
  tool kafka.tools.StorageTool format -t "$cluster_id" -c "$STATE/server.properties" \
    --add-scram "SCRAM-SHA-512=[name=$SASL_USERNAME,password=$SASL_PASSWORD]" > "$STATE/format.log" 2>&1 \
    || die "formatting the Kafka data dir failed; see $STATE/format.log"
  launch_broker
  log "Kafka $KAFKA_VERSION (cluster $cluster_id) at $BOOTSTRAP; SASL_SSL at $SASL_SSL_BOOTSTRAP, mTLS at $MTLS_BOOTSTRAP"
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
  [[ -f $SERVER_KEYSTORE && -f $CA_PEM ]] \
    || die "no test TLS certificates under $TLS_DIR to resume with (made by an older $0?); run: $0 stop; $0 start"
  install
  log "resuming Kafka on $STATE/data"
  launch_broker
  log "Kafka $KAFKA_VERSION at $BOOTSTRAP; SASL_SSL at $SASL_SSL_BOOTSTRAP, mTLS at $MTLS_BOOTSTRAP"
  echo "$BOOTSTRAP"
}

stop() {
  stop_pidfile "$PIDFILE" kafka
}

# One KEY=value a line, no quoting: callers read the lines and `export "$line"`.
print_env() {
  cat <<ENV
SK_KAFKA_BOOTSTRAP=$BOOTSTRAP
SK_KAFKA_SASL_SSL_BOOTSTRAP=$SASL_SSL_BOOTSTRAP
SK_KAFKA_MTLS_BOOTSTRAP=$MTLS_BOOTSTRAP
SK_KAFKA_CA_PEM=$CA_PEM
SK_KAFKA_CLIENT_CERT_PEM=$CLIENT_CERT_PEM
SK_KAFKA_CLIENT_KEY_PEM=$CLIENT_KEY_PEM
SK_KAFKA_SASL_USERNAME=$SASL_USERNAME
SK_KAFKA_SASL_PASSWORD=$SASL_PASSWORD
ENV
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  pause) pause ;;
  resume) resume ;;
  env) print_env ;;
  tool) shift; install; tool "$@" ;;
  *) die "usage: $0 install|start|stop|pause|resume|env|tool <class> [args...]" ;;
esac
