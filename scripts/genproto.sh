#!/usr/bin/env bash
# Regenerates the Go code for proto/ordo/v1/*.proto into pkg/api/ordo/v1
# (or into $1/pkg/api/ordo/v1 when an output root is given: the staleness
# test generates into a temporary directory and compares).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.}
bash scripts/ensure-tools.sh protoc
mkdir -p .tools/bin
go build -o .tools/bin/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
go build -o .tools/bin/protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc
mkdir -p "$out/pkg/api/ordo/v1"
shopt -s nullglob
protos=(proto/ordo/v1/*.proto)
if [ ${#protos[@]} -eq 0 ]; then
  echo "genproto: no .proto files under proto/ordo/v1" >&2
  exit 1
fi
protoc -I proto \
  --plugin=protoc-gen-go=.tools/bin/protoc-gen-go \
  --plugin=protoc-gen-go-grpc=.tools/bin/protoc-gen-go-grpc \
  --go_out="$out" --go_opt=module=github.com/ordo-db/ordo \
  --go-grpc_out="$out" --go-grpc_opt=module=github.com/ordo-db/ordo \
  "${protos[@]}"
