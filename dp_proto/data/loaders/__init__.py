"""Loaders of data files kept in a local data directory (``$DP_PROTO_DATA_DIR``); nothing
here touches the network (:mod:`dp_proto.data.download` fetches files explicitly).

:mod:`.common`  the data directory and reading (gzipped) files
:mod:`.mnist`   MNIST idx files
:mod:`.uci`     UCI tab-separated tables (and the 3-class shuttle)
:mod:`.images`  two-label image folders and CSVs, the Yale faces
:mod:`.scats`   VicRoads SCATS loop-detector counts
"""
