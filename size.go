package heapscope

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/heapscope/heapscope/internal/errs"
)

// Size is a number of bytes: Properties' buffer, file and sampling sizes.
// It writes itself with the largest binary unit that divides it ("64KiB",
// "1MiB", "1000B") and parses what ParseSize parses, so it serves as a
// flag (flag.TextVar); in JSON it is a number of bytes.
type Size int64

// Binary units of Size.
const (
	KiB Size = 1 << 10
	MiB Size = 1 << 20
	GiB Size = 1 << 30
	TiB Size = 1 << 40
)

func (s Size) String() string {
	if s == 0 {
		return "0"
	}
	for _, u := range []struct {
		size Size
		name string
	}{{TiB, "TiB"}, {GiB, "GiB"}, {MiB, "MiB"}, {KiB, "KiB"}} {
		if s%u.size == 0 {
			return strconv.FormatInt(int64(s/u.size), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(s), 10) + "B"
}

// ParseSize parses a size in bytes: a number with an optional unit, B, KiB,
// MiB, GiB, TiB (powers of 1024; K, M, G, T and KB, MB, GB, TB mean the
// same), e.g. "65536", "512KiB", "1MiB". It is what --sample takes.
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.' || t[i] == '-' || t[i] == '+') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		return 0, fmt.Errorf("size %q: not a size (want e.g. 65536, 512KiB, 1MiB): %w", s, errs.ErrInvalidFlags)
	}
	var mult float64
	switch unit {
	case "", "b":
		mult = 1
	case "k", "kb", "kib":
		mult = 1 << 10
	case "m", "mb", "mib":
		mult = 1 << 20
	case "g", "gb", "gib":
		mult = 1 << 30
	case "t", "tb", "tib":
		mult = 1 << 40
	default:
		return 0, fmt.Errorf("size %q: unknown unit %q (want B, KiB, MiB, GiB or TiB): %w", s, unit, errs.ErrInvalidFlags)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("size %q: not a size (want e.g. 65536, 512KiB, 1MiB): %w", s, errs.ErrInvalidFlags)
	}
	b := v * mult
	if b < 0 {
		return 0, fmt.Errorf("size %q: negative: %w", s, errs.ErrInvalidFlags)
	}
	if b != math.Trunc(b) || b > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q: not a whole number of bytes below 2^62: %w", s, errs.ErrInvalidFlags)
	}
	return Size(b), nil
}

// MarshalText implements encoding.TextMarshaler with String.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseSize.
func (s *Size) UnmarshalText(b []byte) (err error) {
	*s, err = ParseSize(string(b))
	return err
}

// MarshalJSON writes s as a number of bytes.
func (s Size) MarshalJSON() ([]byte, error) { return strconv.AppendInt(nil, int64(s), 10), nil }

// UnmarshalJSON reads a number of bytes, or a string ParseSize parses.
func (s *Size) UnmarshalJSON(b []byte) error {
	var text string
	if json.Unmarshal(b, &text) == nil {
		return s.UnmarshalText([]byte(text))
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("size %s: %w", b, errs.ErrInvalidFlags)
	}
	*s = Size(n)
	return nil
}
