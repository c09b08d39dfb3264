// Package tracefile reads and writes heapscope's trace files: what a session
// saw (processes, executable mappings, stacks, allocation events, snapshots,
// and the counts of what was delivered and lost) in a compact, seekable,
// crash-safe form. FORMAT.md in this directory specifies the format byte by
// byte.
//
// A Writer is an event.Sink: a provider's records go in, are gathered into
// chunks, compressed (zstd) and written. A Reader replays a file into any
// event.Sink, whole or for a window of time, skipping the chunks outside it.
//
// The writer follows ETW's log file modes: Sequential stops at the maximum
// size and records that it stopped, Circular keeps the newest maximum size
// worth of events, NewFile starts a new, self-contained file at the maximum
// size. Every chunk is complete on its own, so a file cut anywhere (the
// writer killed, the disk full) reads back every chunk before the cut, and
// Flush puts everything written so far on disk. A write error (a full disk)
// stops the file: what it could not take is counted as lost. A damaged
// chunk loses only what the damage touched: a chunk's definitions are in
// frames with checksums of their own, and its timeline has its own.
package tracefile
