module streamkeeper.dev/node-pause

go 1.24.0
