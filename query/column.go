package query

// chunked is an append-only column in chunks of fixed size: appending never
// copies what is stored (a doubling slice of a 20 M-event trace copies
// gigabytes), and memory grows one chunk at a time.
type chunked[T any] struct {
	chunks [][]T
	n      int
}

const (
	chunkBits = 16
	chunkLen  = 1 << chunkBits
	chunkMask = chunkLen - 1
)

// add appends a zero value and returns a pointer to it.
func (c *chunked[T]) add() *T {
	if c.n&chunkMask == 0 {
		c.chunks = append(c.chunks, make([]T, chunkLen))
	}
	p := &c.chunks[c.n>>chunkBits][c.n&chunkMask]
	c.n++
	return p
}

// at returns a pointer to element i.
func (c *chunked[T]) at(i int) *T { return &c.chunks[i>>chunkBits][i&chunkMask] }

func (c *chunked[T]) len() int { return c.n }
