package tracefile

import (
	"bytes"
	"compress/gzip"
	"io"
	"regexp"

	"github.com/klauspost/compress/zstd"
)

// foreign names the format of a file that is not a heapscope trace, when
// its first bytes tell it: heaptrack's, the trace people most often give
// heapscope by mistake (plain, or compressed with zstd or gzip, as
// heaptrack writes it), and what to open it with; "" when they do not.
func foreign(first []byte) string {
	plain, how := first, ""
	switch {
	case bytes.HasPrefix(first, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		d, err := zstd.NewReader(bytes.NewReader(first), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(64<<20))
		if err != nil {
			return ""
		}
		defer d.Close()
		plain, how = head(d), ", compressed with zstd"
	case bytes.HasPrefix(first, []byte{0x1f, 0x8b}):
		d, err := gzip.NewReader(bytes.NewReader(first))
		if err != nil {
			return ""
		}
		plain, how = head(d), ", compressed with gzip"
	}
	if heaptrackHead.Match(plain) {
		return "it is a heaptrack trace" + how + ": open it with heaptrack_print or heaptrack_gui, or record the program again with `heapscope run`"
	}
	if how != "" {
		return "it is a file" + how
	}
	return ""
}

// heaptrackHead is a heaptrack file's first line: "v", its version and
// the file format's, in hexadecimal ("v 10400 3").
var heaptrackHead = regexp.MustCompile(`^v [0-9a-f]+ [0-9a-f]+\n`)

// head returns what r gives of its first 64 bytes: a truncated stream
// gives what it has.
func head(r io.Reader) []byte {
	b := make([]byte, 64)
	n, _ := io.ReadFull(r, b)
	return b[:n]
}
