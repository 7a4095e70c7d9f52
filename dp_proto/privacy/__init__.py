"""dp_proto.privacy."""
