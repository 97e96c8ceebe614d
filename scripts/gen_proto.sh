#!/usr/bin/env bash
# Regenerate ateom/_proto/ from proto/ateom.proto (committed; rerun after editing the proto).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
out=ateom/_proto
mkdir -p "$out"
"$PYTHON" -m grpc_tools.protoc -I proto \
    --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" proto/ateom.proto
# grpc_tools writes a top-level `import ateom_pb2`; make it package-relative.
sed -i 's/^import ateom_pb2 as ateom__pb2$/from ateom._proto import ateom_pb2 as ateom__pb2/' "$out/ateom_pb2_grpc.py"
cat > "$out/__init__.py" <<'PY'
"""Generated protobuf/gRPC code for proto/ateom.proto (scripts/gen_proto.sh). Do not edit."""
PY
