#!/usr/bin/env bash
# kafka-broker-api-versions.sh of the apache/kafka stand-in: Kafka's own script's main class, through kafka-run-class.sh.
exec "$(dirname "$0")/kafka-run-class.sh" org.apache.kafka.tools.BrokerApiVersionsCommand "$@"
