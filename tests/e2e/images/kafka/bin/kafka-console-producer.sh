#!/usr/bin/env bash
# kafka-console-producer.sh of the apache/kafka stand-in: Kafka's own script's main class, through kafka-run-class.sh.
if [ -z "${KAFKA_HEAP_OPTS:-}" ]; then
  export KAFKA_HEAP_OPTS="-Xmx512M"
fi
exec "$(dirname "$0")/kafka-run-class.sh" org.apache.kafka.tools.ConsoleProducer "$@"
