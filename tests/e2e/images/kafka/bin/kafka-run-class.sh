#!/usr/bin/env bash
# kafka-run-class.sh of the apache/kafka stand-in (tests/e2e/images/kafka): runs a Kafka main class
# on /opt/kafka/libs with the JVM options Kafka's own script gives it, from the same variables
# with the same defaults (KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS, KAFKA_GC_LOG_OPTS,
# KAFKA_JMX_OPTS and JMX_PORT, KAFKA_LOG4J_OPTS, LOG_DIR, KAFKA_OPTS, JAVA_HOME), so the wrappers
# beside it behave as Kafka's bin/*.sh do:
#   kafka-run-class.sh [-daemon] [-name servicename] [-loggc] classname [opts]
# Left out of Kafka's script: the classpath of a source tree, Cygwin paths and the native mode.
if [ $# -lt 1 ]; then
  echo "USAGE: $0 [-daemon] [-name servicename] [-loggc] classname [opts]"
  exit 1
fi
base_dir=$(cd "$(dirname "$0")/.." && pwd)
CLASSPATH="${CLASSPATH:+$CLASSPATH:}$base_dir/libs/*"

if [ -z "${KAFKA_JMX_OPTS:-}" ]; then
  KAFKA_JMX_OPTS="-Dcom.sun.management.jmxremote=true -Dcom.sun.management.jmxremote.authenticate=false -Dcom.sun.management.jmxremote.ssl=false"
fi
if [ -n "${JMX_PORT:-}" ]; then
  KAFKA_JMX_OPTS="$KAFKA_JMX_OPTS -Dcom.sun.management.jmxremote.port=$JMX_PORT"
  case "$KAFKA_JMX_OPTS" in
    *-Dcom.sun.management.jmxremote.rmi.port=*) ;;
    *) KAFKA_JMX_OPTS="$KAFKA_JMX_OPTS -Dcom.sun.management.jmxremote.rmi.port=$JMX_PORT" ;;
  esac
fi

LOG_DIR="${LOG_DIR:-$base_dir/logs}"
mkdir -p "$LOG_DIR"
KAFKA_LOG4J_OPTS="${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=$base_dir/config/tools-log4j2.yaml}"
KAFKA_LOG4J_CMD_OPTS="-Dkafka.logs.dir=$LOG_DIR $KAFKA_LOG4J_OPTS"

if [ -n "${JAVA_HOME:-}" ]; then JAVA="$JAVA_HOME/bin/java"; else JAVA=java; fi
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx256M}"
KAFKA_JVM_PERFORMANCE_OPTS="${KAFKA_JVM_PERFORMANCE_OPTS:--server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -Djava.awt.headless=true}"

DAEMON_MODE=false
DAEMON_NAME=""
GC_LOG_ENABLED=false
while [ $# -gt 0 ]; do
  case "$1" in
    -name) DAEMON_NAME=$2; CONSOLE_OUTPUT_FILE=$LOG_DIR/$DAEMON_NAME.out; shift 2 ;;
    -loggc) [ -z "${KAFKA_GC_LOG_OPTS:-}" ] && GC_LOG_ENABLED=true; shift ;;
    -daemon) DAEMON_MODE=true; shift ;;
    *) break ;;
  esac
done
if [ "$GC_LOG_ENABLED" = true ]; then
  # Java 9 and later (this image has 17): unified logging, rotated like Kafka's own script does.
  KAFKA_GC_LOG_OPTS="-Xlog:gc*:file=$LOG_DIR/$DAEMON_NAME-gc.log:time,tags:filecount=10,filesize=100M"
fi

# Word splitting of the *_OPTS variables is intended: each holds several JVM options.
# shellcheck disable=SC2086
if [ "$DAEMON_MODE" = true ]; then
  nohup "$JAVA" $KAFKA_HEAP_OPTS $KAFKA_JVM_PERFORMANCE_OPTS ${KAFKA_GC_LOG_OPTS:-} $KAFKA_JMX_OPTS \
    $KAFKA_LOG4J_CMD_OPTS -cp "$CLASSPATH" ${KAFKA_OPTS:-} "$@" > "${CONSOLE_OUTPUT_FILE:-$LOG_DIR/kafka.out}" 2>&1 < /dev/null &
else
  exec "$JAVA" $KAFKA_HEAP_OPTS $KAFKA_JVM_PERFORMANCE_OPTS ${KAFKA_GC_LOG_OPTS:-} $KAFKA_JMX_OPTS \
    $KAFKA_LOG4J_CMD_OPTS -cp "$CLASSPATH" ${KAFKA_OPTS:-} "$@"
fi
