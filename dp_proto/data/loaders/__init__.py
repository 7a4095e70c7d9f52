"""Loaders of data files kept in a local data directory (``$DP_PROTO_DATA_DIR``); nothing
here touches the network (``dp_proto.data.download`` fetches files explicitly).

``.common``  the data directory and reading (gzipped) files
``.mnist``   MNIST idx files
``.uci``     UCI tab-separated tables (and the 3-class shuttle)
``.images``  two-label image folders and CSVs, the Yale faces
``.scats``   VicRoads SCATS loop-detector counts
``.motion``  UCI HAPT smartphone signals cut into activity windows
"""
