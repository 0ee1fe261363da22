#!/usr/bin/env bash
# kafka-storage.sh of the apache/kafka stand-in: Kafka's own script's main class, through kafka-run-class.sh.
exec "$(dirname "$0")/kafka-run-class.sh" kafka.tools.StorageTool "$@"
