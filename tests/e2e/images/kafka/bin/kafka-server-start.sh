#!/usr/bin/env bash
# kafka-server-start.sh of the apache/kafka stand-in: the broker (kafka.Kafka) in the foreground, or
# with -daemon in the background, with Kafka's own script's defaults: log4j2.yaml of the config
# folder, a 1 GiB heap, GC logging and the kafkaServer name.
if [ $# -lt 1 ]; then
  echo "USAGE: $0 [-daemon] server.properties [--override property=value]*"
  exit 1
fi
base_dir=$(dirname "$0")
if [ -z "${KAFKA_LOG4J_OPTS:-}" ]; then
  export KAFKA_LOG4J_OPTS="-Dlog4j2.configurationFile=$base_dir/../config/log4j2.yaml"
fi
if [ -z "${KAFKA_HEAP_OPTS:-}" ]; then
  export KAFKA_HEAP_OPTS="-Xmx1G -Xms1G"
fi
EXTRA_ARGS=${EXTRA_ARGS-'-name kafkaServer -loggc'}
if [ "$1" = -daemon ]; then
  EXTRA_ARGS="-daemon $EXTRA_ARGS"
  shift
fi
# EXTRA_ARGS holds several options.
# shellcheck disable=SC2086
exec "$base_dir/kafka-run-class.sh" $EXTRA_ARGS kafka.Kafka "$@"
