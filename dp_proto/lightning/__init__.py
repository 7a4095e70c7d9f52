"""dp_proto.lightning."""
