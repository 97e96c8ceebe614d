"""Generated protobuf/gRPC code for proto/ateom.proto (scripts/gen_proto.sh). Do not edit."""
